"""What the ledger hands back: immutable snapshots of its rows, never live ORM objects.

Frozen dataclasses so that a runner cannot mutate a row and believe it was written; every
change goes through a ``Ledger`` method that commits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

__all__ = [
    "CALL_STATUSES",
    "OUTCOME_STATUSES",
    "SENT_STATUSES",
    "CallOutcome",
    "CallRow",
    "CallStatus",
    "Claim",
    "JobRow",
    "LedgerStatus",
    "OutcomeStatus",
]

CallStatus = Literal["claimed", "answered", "failed", "not_sent", "unknown"]
OutcomeStatus = Literal["answered", "failed", "not_sent", "unknown"]

CALL_STATUSES: Final = frozenset({"claimed", "answered", "failed", "not_sent", "unknown"})
#: What a claimed call may end as (``claimed`` itself is not an outcome).
OUTCOME_STATUSES: Final = frozenset({"answered", "failed", "not_sent", "unknown"})
#: Calls whose request may have reached the provider, so may have been paid for.
SENT_STATUSES: Final = frozenset({"answered", "failed", "unknown"})


@dataclass(frozen=True)
class JobRow:
    job_id: str
    kind: str
    batch: str | None
    reply_to: str
    fingerprint: str
    deadline: datetime
    job_json: str
    created_at: datetime
    terminal_type: str | None
    terminal_reason: str | None
    terminal_message: str | None
    finished_at: datetime | None
    published_at: datetime | None

    @property
    def finished(self) -> bool:
        """The job's terminal message is stored (it may still wait to be published)."""
        return self.terminal_message is not None


@dataclass(frozen=True)
class CallRow:
    job_id: str
    step: str
    provider: str
    model: str | None
    request_sha256: str | None
    status: CallStatus
    lease_expires: datetime
    claims: int
    claimed_at: datetime
    finished_at: datetime | None
    cost_usd: float | None
    cost_basis: str | None
    error_code: str | None
    receipt_json: str | None
    outcome_json: str | None
    #: The shared request's id when the call was packed with other jobs' (else None).
    pack_id: str | None = None


@dataclass(frozen=True)
class Claim:
    """The answer to "may I send this call?".

    ``fresh`` is True only for the one caller whose claim was just committed: it may send
    now. Otherwise ``call`` is the row as stored, and its ``status`` tells the caller what to
    do (replay ``answered``/``failed``, escalate ``unknown``, wait out a live ``claimed``).
    """

    fresh: bool
    call: CallRow


@dataclass(frozen=True)
class CallOutcome:
    step: str
    status: OutcomeStatus
    receipt_json: str | None = None
    outcome_json: str | None = None
    cost_usd: float | None = None
    cost_basis: str | None = None
    error_code: str | None = None


@dataclass(frozen=True)
class LedgerStatus:
    """Figures for ``decisions status``, for one batch or the whole ledger.

    Cost is summed per basis over calls that may have been sent (answered, failed, unknown).
    Calls with no basis are counted under ``"unknown"``; their summed cost is ``None`` when
    none of them has a cost, because an unknown cost is never reported as 0.
    """

    batch: str | None
    jobs_total: int
    #: Jobs with no terminal message yet.
    jobs_open: int
    #: Finished jobs by terminal type (result, escalation, rejected).
    jobs_by_type: dict[str, int] = field(default_factory=dict)
    #: Finished jobs by ``"type:reason"`` for those with a reason (``escalation:low_confidence``).
    jobs_by_reason: dict[str, int] = field(default_factory=dict)
    #: Finished jobs whose terminal message is not published yet (the outbox backlog).
    jobs_unpublished: int = 0
    calls_by_status: dict[str, int] = field(default_factory=dict)
    #: Sent calls by cost basis (reported, estimate, unknown).
    calls_by_basis: dict[str, int] = field(default_factory=dict)
    cost_by_basis: dict[str, float | None] = field(default_factory=dict)
    #: Requests that may have left (answered + failed + unknown calls, a packed request once).
    requests_sent: int = 0
    #: Calls whose request may have left; more than ``requests_sent`` when jobs were packed.
    calls_sent: int = 0
    #: Of ``requests_sent``, the requests that carried several jobs' questions.
    requests_packed: int = 0
    #: Claims committed, counting re-claims of ``not_sent`` calls.
    claims_total: int = 0

    @property
    def cost_known_usd(self) -> float:
        """Reported plus estimated cost; unknown cost is left out, not counted as 0."""
        return sum(v for k, v in self.cost_by_basis.items() if k != "unknown" and v is not None)
