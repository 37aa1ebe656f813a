"""The one exception tree of decision-worker.

Every exception this package raises on purpose derives from ``DecisionWorkerError``::

    DecisionWorkerError
    ├── ConfigurationError          a setting, variable or registry entry is wrong; nothing runs
    ├── JobInvalid                  a job did not validate; ``problems`` names every bad field
    ├── NotStrictJSON (ValueError)  a text is not strict JSON (shared.strict_json)
    ├── DecisionProviderError       a provider call failed; ``code`` is one of ProviderErrorCode
    ├── LedgerError                 the ledger cannot give its guarantee
    │   ├── SchemaBehind            the database schema is older than this code (run migrations)
    │   └── JobConflict             a job id came back with different content
    ├── ResolutionInvalid           a reviewer's answer does not fit the question or menu
    ├── EscalationNotFound          no open escalation has that id (or it is held by another)
    │   └── AlreadyResolved         the job was resolved before: by whom, when
    ├── PublishFailed               Redis refused a reply's publish; nothing was written
    ├── SubmitFailed                a batch's message was not published; ``queued`` names the
                                    jobs whose messages were (shared.client)
    ├── HandlerOutputInvalid (TypeError) a handler or tool returned no JSON; names the type only
    ├── ExitContained               a handler, tool or job raised SystemExit/KeyboardInterrupt
                                    (or another BaseException); kept as that job's error
    ├── DecisionError (ValueError)  a menu pick never parsed; ``kind``, ``attempts``, ``reply_head``
    ├── PickError                   one model reply is not a usable pick (retried; shared.menus)
    └── MenuSpecInvalid (ValueError) a menu or schema encoding does not decode; ``path``
                                    (shared.menus)

Messages never carry an API key, an auth header or a request body: errors that wrap
transport failures keep only the exception's class name and the phase it happened in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "AlreadyResolved",
    "ConfigurationError",
    "DecisionError",
    "DecisionProviderError",
    "DecisionWorkerError",
    "EscalationNotFound",
    "ExitContained",
    "FieldProblem",
    "HandlerOutputInvalid",
    "JobConflict",
    "JobInvalid",
    "LedgerError",
    "NotAdmitted",
    "NotStrictJSON",
    "ProviderErrorCode",
    "PublishFailed",
    "ResolutionInvalid",
    "SchemaAhead",
    "SchemaBehind",
    "SubmitFailed",
]

ProviderErrorCode = Literal[
    "configuration",
    "auth",
    "invalid_request",
    "rate_limited",
    "outcome_unknown",
    "connection",
    "invalid_response",
    "aborted",
    "timeout",
]


class DecisionWorkerError(Exception):
    """Root of every error decision-worker raises on purpose."""


class ConfigurationError(DecisionWorkerError):
    """A setting, environment variable or registry entry is wrong."""


@dataclass(frozen=True)
class FieldProblem:
    """One bad field of a job: a dotted path (``questions.q1.criteria``) and what is wrong."""

    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class JobInvalid(DecisionWorkerError):
    """A job failed validation. Nothing was sent for it."""

    def __init__(self, problems: list[FieldProblem], job_id: str | None = None) -> None:
        self.problems = problems
        self.job_id = job_id
        listed = "; ".join(f"{p.field}: {p.message}" for p in problems) or "invalid job"
        super().__init__(f"job {job_id or '?'} is invalid: {listed}")


class NotStrictJSON(DecisionWorkerError, ValueError):
    """A line or message is not strict JSON (not UTF-8, a byte order mark, NaN, a duplicate
    key...); the message says what and where."""


class DecisionProviderError(DecisionWorkerError):
    """A decision provider call failed; ``code`` tells the ledger what happened on the wire.

    ``outcome_unknown`` carries the cost booked for the request (``cost_usd``/``cost_basis``,
    ``None`` when unknown, never 0). ``invalid_request`` carries the provider's ``ref_id``.
    """

    def __init__(
        self,
        code: ProviderErrorCode,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        ref_id: str | None = None,
        cost_usd: float | None = None,
        cost_basis: Literal["reported", "estimate"] | None = None,
        retry_after_s: float | None = None,
        attempts: int = 0,
        receipt: Any = None,
        field: str | None = None,
    ) -> None:
        self.code: ProviderErrorCode = code
        # The job field an ``invalid_request`` found before sending (``questions.q1.criteria``).
        self.field = field
        self.provider = provider
        self.status_code = status_code
        self.ref_id = ref_id
        self.cost_usd = cost_usd
        self.cost_basis = cost_basis
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        # The receipt of the failed call (a shared.replies.Receipt), filled by the provider.
        self.receipt = receipt
        prefix = f"{provider}: " if provider else ""
        super().__init__(f"{prefix}{code}: {message}")
        self.detail = message

    def problem(self, field: str, *, whose: bool = False) -> FieldProblem:
        """This refusal as the problem of the job's ``field`` (a rejection): the detail
        without the field it already begins with (``state: state: ...`` otherwise); with
        ``whose``, naming the provider whose limit it is (a verifier's, not the job's own).
        A request's ``assets`` are the job's ``images``."""
        message = self.detail
        for named in (self.field, field):
            if named and message.startswith(f"{named}: "):
                message = message.removeprefix(f"{named}: ")
        if whose and self.provider and self.provider.lower() not in message.lower():
            message = f"{message} ({self.provider})"
        if field == "assets" or field.startswith("assets."):  # a request's name for them
            field = "images" + field.removeprefix("assets")
        return FieldProblem(field, message)


class LedgerError(DecisionWorkerError):
    """The ledger cannot give its at-most-once guarantee right now."""


class SchemaBehind(LedgerError):
    """The ledger's schema is behind this code; run ``decisions migrate``."""


class SchemaAhead(LedgerError):
    """The ledger's schema was migrated by a newer release than this code: upgrade it.

    A configuration's mistake (this release against that ledger), not an outage: commands
    and ``decisions worker`` exit 2 on it, as on ``SchemaBehind``."""


class JobConflict(LedgerError):
    """A job id was seen before with different content."""


class ResolutionInvalid(DecisionWorkerError):
    """A reviewer's answer does not fit the question or menu it answers."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))


class EscalationNotFound(DecisionWorkerError):
    """No open escalation with that id, or another reviewer holds it."""


class AlreadyResolved(EscalationNotFound):
    """The escalation's job was resolved before (at most one resolution a job)."""

    def __init__(self, job_id: str, reviewer: str, resolved_at: str, entry_id: str) -> None:
        self.job_id = job_id
        self.reviewer = reviewer
        self.resolved_at = resolved_at
        self.entry_id = entry_id
        super().__init__(
            f"job {job_id} was already resolved by {reviewer} at {resolved_at} "
            f"(escalation {entry_id}); this resolution was not published"
        )


class PublishFailed(DecisionWorkerError):
    """Redis refused a terminal message's publish (a key that is not a stream, out of
    memory): nothing was written, and the ledger must not be marked published."""


class SubmitFailed(DecisionWorkerError):
    """Publishing one of a batch's messages failed (the broker, or the intake records'
    Redis, refused it); raised ``from`` that error. Every job id the submit validated is in
    exactly one list:

    - ``queued``: in a message the broker took: it runs, and is republished if the broker
      loses it (its intake record stays);
    - ``unconfirmed``: in the message whose publish raised. The broker may have taken it all
      the same (a reply that never came back), so these may still run; their intake records
      were withdrawn, so nothing republishes them later;
    - ``unsent``: never handed to the broker: these do not run.

    ``rejected`` are the ids rejected at once (their ``rejected`` message is on the stream),
    ``rejected_lines`` the 0-based positions of those rejected without a readable id (their
    message is on the stream under an id made from the line: ``SubmitReport``'s split);
    jobs after the failure were never read. Submitting the unconfirmed and unsent jobs again
    with the same ids is safe: the ledger runs a job id once. Doing their work another way is
    safe for the unsent only.
    """

    def __init__(
        self,
        queued: list[str],
        unconfirmed: list[str],
        unsent: list[str],
        rejected: list[str] | None = None,
        rejected_lines: list[int] | None = None,
    ) -> None:
        self.queued = queued
        self.unconfirmed = unconfirmed
        self.unsent = unsent
        self.rejected = rejected or []
        self.rejected_lines = rejected_lines or []
        super().__init__(
            f"submit failed after {len(queued)} job(s) were queued: "
            f"{len(unconfirmed)} in the message whose publish failed (it may have reached the "
            f"broker), {len(unsent)} not sent"
        )

    @property
    def not_queued(self) -> list[str]:
        """The jobs not known to be queued: the ones to submit again (same ids)."""
        return [*self.unconfirmed, *self.unsent]


class HandlerOutputInvalid(DecisionWorkerError, TypeError):
    """A handler or tool returned a value with no JSON form. The message names its type and
    never its repr, which may hold anything (a password, a key)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(f"returned a value of type {type_name}, which is not JSON")


class ExitContained(DecisionWorkerError):
    """Code run for a job (a menu handler, a tool, a job's coroutine) raised ``SystemExit``,
    ``KeyboardInterrupt`` or another ``BaseException`` that would have stopped the worker's
    loop; it is that job's error instead, and the worker goes on."""

    def __init__(self, raised: BaseException, where: str) -> None:
        self.raised_type = type(raised).__name__
        super().__init__(f"{where} raised {self.raised_type}: {raised}")


class NotAdmitted(DecisionWorkerError):
    """A job a stopping worker never started (``worker.process.inflight``): nothing of it was done,
    and its message, left unacknowledged, goes back to the broker."""


class DecisionError(DecisionWorkerError, ValueError):
    """The model never produced a valid menu pick (retries exhausted).

    Subclasses ``ValueError`` so that older ``except ValueError`` code still catches it.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        attempts: int = 1,
        reply_head: str = "",
        errors: list[dict[str, str]] | None = None,
    ) -> None:
        self.kind = kind
        self.message = message
        self.attempts = attempts
        self.reply_head = reply_head
        self.errors = errors or []
        super().__init__(f"{kind}: {message} (after {attempts} attempt(s))")
