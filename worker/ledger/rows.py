"""What the ledger hands back: immutable snapshots of its rows, never live ORM objects.

Frozen dataclasses so that a runner cannot mutate a row and believe it was written; every
change goes through a ``Ledger`` method that commits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from shared.replies import CallStatus

__all__ = [
    "CALL_STATUSES",
    "LOCAL_PROVIDER",
    "OUTCOME_STATUSES",
    "SENT_STATUSES",
    "BudgetAsk",
    "BudgetRefusal",
    "BudgetStatus",
    "CallOutcome",
    "CallRow",
    "Claim",
    "JobRow",
    "LedgerStatus",
    "RowStatus",
]

#: A call row's status: ``claimed`` while in flight, then its outcome (``CallStatus``, the
#: one outcome type, as receipts show it).
RowStatus = Literal["claimed"] | CallStatus

CALL_STATUSES: Final = frozenset({"claimed", "answered", "failed", "not_sent", "unknown"})
#: What a claimed call may end as (``claimed`` itself is not an outcome).
OUTCOME_STATUSES: Final = frozenset({"answered", "failed", "not_sent", "unknown"})
#: Calls whose request may have reached the provider, so may have been paid for.
SENT_STATUSES: Final = frozenset({"answered", "failed", "unknown"})
#: The ``provider`` of a call that is a local tool or handler run, not a request: it is
#: claimed like any call (at most once) but never counted as sent nor paid for.
LOCAL_PROVIDER: Final = "handler"


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
    #: Times ``decisions budget resume`` reopened the job (0: never).
    resumes: int = 0

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
    status: RowStatus
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
    #: The worst case reserved against ``budget_scopes`` (space separated) at the claim;
    #: None when no budget covered the call.
    reserved_usd: float | None = None
    budget_scopes: str | None = None
    #: How far past its last write by its holder the lease may be, in seconds
    #: (``worker.ledger.leases``); None on a row written before it was kept.
    lease_reach_s: float | None = None


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
    status: CallStatus
    receipt_json: str | None = None
    outcome_json: str | None = None
    cost_usd: float | None = None
    cost_basis: str | None = None
    error_code: str | None = None
    #: The claim this outcome closes (the call's ``claims`` count when it was claimed): it
    #: is recorded only onto that very claim, so a write retried after its commit was lost
    #: can never land on a later delivery's re-claim. None: any claim of the call.
    claims: int | None = None


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


@dataclass(frozen=True)
class BudgetAsk:
    """What a claim needs to reserve a request's worst case (``worker.ledger.budget_ops``)."""

    #: The request's worst-case cost; None: the provider has no known maximum (such a call
    #: cannot run under a budget).
    worst_usd: float | None
    batch: str | None = None
    #: The job's ``budget_usd``: creates the batch's budget if it has none yet.
    batch_budget_usd: float | None = None
    #: The fleet's daily ceiling for the call's provider (settings), if any.
    daily_ceiling_usd: float | None = None
    #: The setting or field a "no known maximum" refusal names.
    field: str = "budget_usd"


@dataclass(frozen=True)
class BudgetRefusal:
    """A request a budget could not take: nothing was claimed, nothing sent."""

    scope: str
    limit_usd: float | None
    committed_usd: float
    #: The request's worst case; None when it has no known maximum.
    worst_usd: float | None
    provider: str
    field: str = "budget_usd"

    @property
    def left_usd(self) -> float | None:
        if self.limit_usd is None:
            return None
        return max(0.0, round(self.limit_usd - self.committed_usd, 12))

    def figures(self) -> dict[str, object]:
        return {
            "budget": self.scope,
            "limit_usd": self.limit_usd,
            "committed_usd": round(self.committed_usd, 12),
            "left_usd": self.left_usd,
            "worst_case_usd": self.worst_usd,
            "provider": self.provider,
        }

    def detail(self) -> str:
        """One line for the escalation: the budget, its figures, and the way on."""
        if self.worst_usd is None:
            return (
                f"{self.field}: provider {self.provider} has no known maximum price, so it "
                f"cannot run under budget {self.scope}; set DECISIONS_MAX_PRICE_PER_MTOK_USD "
                "for it (or use a provider with a list price); nothing was sent"
            )
        fix = "decisions budget set BATCH USD, then decisions budget resume BATCH"
        if not self.scope.startswith("batch:"):
            fix = "raise DECISIONS_DAILY_CEILING_USD or wait for the next (UTC) day"
        return (
            f"budget {self.scope} exhausted: limit ${self.limit_usd:.6f}, committed "
            f"${self.committed_usd:.6f} (spent and reserved), left ${self.left_usd or 0:.6f}; "
            f"this request's worst case ${self.worst_usd:.6f} does not fit; nothing was sent "
            f"({fix})"
        )


@dataclass(frozen=True)
class BudgetStatus:
    """One budget's figures: ``committed = reserved + held_unknown + booked + spent_before``
    (up to rounding), and what is left of the limit."""

    scope: str
    limit_usd: float | None
    committed_usd: float
    #: Reservations of calls in flight (claimed, not settled).
    reserved_usd: float
    calls_in_flight: int
    #: Reservations kept whole for calls whose cost stayed unknown (never counted at 0).
    held_unknown_usd: float
    calls_unknown_cost: int
    #: Booked costs of settled calls under this budget, by basis (reported, estimate).
    booked_by_basis: dict[str, float] = field(default_factory=dict)
    #: Known costs of the batch booked before its budget was set (counted in).
    spent_before_usd: float = 0.0
    #: The batch's jobs escalated ``budget_exhausted`` (``decisions budget resume`` reruns).
    jobs_exhausted: int = 0

    @property
    def spent_usd(self) -> float:
        return round(sum(self.booked_by_basis.values()) + self.spent_before_usd, 12)

    @property
    def left_usd(self) -> float | None:
        if self.limit_usd is None:
            return None
        return round(self.limit_usd - self.committed_usd, 12)
