"""What a call came to, as the ledger stores it and as receipts show it.

- ``call_status``: a failure's call status, by the one error-code → call-status map
  (``CALL_STATUS``, defined with the providers, which stamp their receipts with it), and
  ``failure_reason``: the escalation a failure means.
- ``SentCall``: the result of sending one claimed call; ``outcome_of`` the ``CallOutcome``
  the ledger records for it.
- ``stored_receipt``/``stored_answers``/``stored_outcome``: a settled call read back
  (replayed, never re-sent). They never raise: a column a hand (a repair, a restore) left
  unreadable must not crash the redelivery, or its job would never get a terminal message.
  An outcome that cannot be read is none (``stored_outcome`` reads one with a kind's own
  reader, as the menu kind's stored replies, tool results and values; the kinds then escalate
  an answered call ``decision_interrupted``: what it answered is not known, and it is never
  sent or run again); a receipt that cannot be read is rebuilt from the call's own columns.
  Each is logged naming the call, and ``unreadable`` is the escalation's detail, naming it
  too (by its key, ``job id/step``), not the "interrupted" of a call never recorded.
- ``lost_cost``: what a call lost with its worker is booked at (the provider's rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import structlog
from pydantic import ValidationError

from shared.errors import DecisionProviderError, ProviderErrorCode
from shared.outcomes import CALL_STATUS, call_status
from shared.replies import Answer, CallStatus, EscalationReason, Receipt
from worker.ledger import LOCAL_PROVIDER, CallOutcome, CallRow
from worker.providers.base import DecisionProvider, PreparedRequest

__all__ = [
    "CALL_STATUS",
    "LostCost",
    "SentCall",
    "answers_json_of",
    "bare_receipt",
    "call_status",
    "failure_reason",
    "lost_cost",
    "outcome_of",
    "stored_answers",
    "stored_outcome",
    "stored_receipt",
    "unreadable",
]

log = structlog.get_logger("decisions.delivery")

#: What reading a damaged column raises: not JSON (``ValueError``), nested past the parser
#: (``RecursionError``), or not the shape it should be (``ValidationError``, and
#: ``AttributeError``/``TypeError`` for a list, string or null where an object belongs).
_UNREADABLE: Final = (ValueError, RecursionError, ValidationError, AttributeError, TypeError)

T = TypeVar("T")

#: The escalation a provider failure means; every other code is ``provider_error``.
_REASON: Final[dict[ProviderErrorCode, EscalationReason]] = {
    "outcome_unknown": "decision_interrupted",
    "timeout": "deadline_exceeded",
}


def failure_reason(error: DecisionProviderError) -> EscalationReason:
    return _REASON.get(error.code, "provider_error")


def outcome_of(
    status: str, receipt: Receipt, outcome_json: str | None, error_code: str | None
) -> CallOutcome:
    """The ledger's record of a call: its status, receipt, stored outcome and cost."""
    return CallOutcome(
        step=receipt.step,
        status=status,  # type: ignore[arg-type]
        receipt_json=receipt.model_dump_json(),
        outcome_json=outcome_json,
        cost_usd=receipt.cost_usd,
        cost_basis=receipt.cost_basis,
        error_code=error_code,
    )


@dataclass(frozen=True)
class SentCall:
    """What sending one claimed call came to: its ledger status, receipt and answers."""

    status: CallStatus
    receipt: Receipt
    answers: dict[str, Answer] | None = None
    #: Why the job escalates when the call brought no answers.
    reason: EscalationReason = "provider_error"
    detail: str = ""
    error_code: str | None = None
    cancelled: bool = False

    def outcome(self) -> CallOutcome:
        answers_json = None if self.answers is None else answers_json_of(self.answers)
        return outcome_of(self.status, self.receipt, answers_json, self.error_code)


def answers_json_of(answers: dict[str, Answer]) -> str:
    """Answers as a call's ``outcome_json`` stores them (``stored_answers`` reads them)."""
    return json.dumps({qid: a.model_dump(mode="json") for qid, a in answers.items()})


def stored_answers(call: CallRow) -> dict[str, Answer] | None:
    """The decoded answers an ``answered`` call stored; None for any other call, and for one
    whose stored outcome cannot be read (logged): its answers are not known."""
    if call.status != "answered":
        return None
    return stored_outcome(call, _answers)


def _answers(outcome_json: str | None) -> dict[str, Answer]:
    if not outcome_json:
        # Answered, so it stored its answers: none at all is a damaged row too.
        raise ValueError("an answered call stored no answers")
    stored: Any = json.loads(outcome_json)
    return {qid: Answer.model_validate(a) for qid, a in stored.items()}


def stored_outcome(call: CallRow, read: Callable[[str | None], T]) -> T | None:
    """``read(call.outcome_json)``: what the call stored, read by its kind's own reader
    (which raises on a column not of its shape); None (logged) when it cannot be read.

    ``read`` never returns None for a readable outcome: None here means unknown."""
    try:
        return read(call.outcome_json)
    except _UNREADABLE as exc:
        _log_unreadable(call, "outcome_json", exc)
        return None


def unreadable(call: CallRow) -> str:
    """The detail of an escalation for ``call`` when its stored outcome cannot be read: the
    call by its key (``job id/step``), which a person finds the row by."""
    head = f"the stored outcome of call {call.job_id}/{call.step} cannot be read"
    if call.provider == LOCAL_PROVIDER:
        # A tool or handler: it ran, and may have had its effect.
        what = "returned" if call.status == "answered" else "raised"
        return f"{head}; what it {what} is not known, and it is never run again"
    return f"{head}; whether or how it was answered is not known, and it is never sent again"


def _log_unreadable(call: CallRow, column: str, exc: BaseException) -> None:
    # The message names the call; a person finds the row by it (the escalation carries the
    # call's receipt, status and step).
    log.error(
        "call.stored_unreadable",
        job_id=call.job_id,
        step=call.step,
        column=column,
        error=type(exc).__name__,
        # A receipt that cannot be read is rebuilt: only an outcome's escalates the job.
        detail=unreadable(call) if column == "outcome_json" else None,
    )


def bare_receipt(
    provider: DecisionProvider,
    prepared: PreparedRequest,
    error: DecisionProviderError | None,
    step: str,
) -> Receipt:
    """A receipt for a call whose provider gave none (a failure before any response)."""
    return Receipt(
        step=step,
        provider=provider.name,
        model=prepared.model,
        status="unknown",
        request_sha256=prepared.request_sha256,
        cost_usd=error.cost_usd if error else None,
        cost_basis=error.cost_basis if error else None,
        transport_attempts=error.attempts if error else 0,
        ref_id=error.ref_id if error else None,
    )


def stored_receipt(call: CallRow) -> Receipt:
    """The receipt of a settled call, marked ``replayed``; built from the call's own columns
    when it stored none, or one that cannot be read (logged)."""
    if call.receipt_json:
        try:
            return Receipt.model_validate_json(call.receipt_json).model_copy(
                update={"replayed": True, "status": call.status}
            )
        except _UNREADABLE as exc:
            _log_unreadable(call, "receipt_json", exc)
    return Receipt(
        step=call.step,
        provider=call.provider,
        model=call.model,
        status=call.status,
        request_sha256=call.request_sha256,
        cost_usd=call.cost_usd,
        cost_basis=call.cost_basis,
        error_code=call.error_code,
        replayed=True,
    )


LostCost = tuple[float | None, str | None]


def lost_cost(provider: DecisionProvider, prepared: PreparedRequest) -> LostCost:
    """What a request lost with its worker is booked at: the provider's rule for an unknown
    outcome (Parallel: its list price as an estimate; OpenRouter: unknown)."""
    rule = getattr(provider, "unknown_cost", None)
    if rule is None:
        return None, None
    cost = rule(prepared)
    return cost.usd, cost.basis
