"""The SQL ledger: every paid call is claimed (committed) before it is sent, at most once.

``Ledger`` is the one entry point; rows come back as frozen snapshots (``JobRow``,
``CallRow``). The state machine of a call is drawn in ``call_ops``; SQLite and PostgreSQL
engine settings, and why, in ``engine``; schema versions in ``schema`` and ``migrations/``.
"""

from worker.ledger.errors import (
    CallNotFound,
    ClaimLost,
    JobFinished,
    JobNotFound,
    LedgerConflict,
    LedgerUnavailable,
    OverBudget,
    PlannedOtherwise,
    TablesMissing,
)
from worker.ledger.pack_ops import MemberClaim, MemberFinish, PackClaim
from worker.ledger.rows import (
    CALL_STATUSES,
    LOCAL_PROVIDER,
    OUTCOME_STATUSES,
    SENT_STATUSES,
    BudgetAsk,
    BudgetRefusal,
    BudgetStatus,
    CallOutcome,
    CallRow,
    Claim,
    JobRow,
    LedgerStatus,
    RowStatus,
)
from worker.ledger.schema import current_revision, head_revision
from worker.ledger.store import Ledger

__all__ = [
    "CALL_STATUSES",
    "LOCAL_PROVIDER",
    "OUTCOME_STATUSES",
    "SENT_STATUSES",
    "BudgetAsk",
    "BudgetRefusal",
    "BudgetStatus",
    "CallNotFound",
    "CallOutcome",
    "CallRow",
    "Claim",
    "ClaimLost",
    "JobFinished",
    "JobNotFound",
    "JobRow",
    "Ledger",
    "LedgerConflict",
    "LedgerStatus",
    "LedgerUnavailable",
    "MemberClaim",
    "MemberFinish",
    "OverBudget",
    "PackClaim",
    "PlannedOtherwise",
    "RowStatus",
    "TablesMissing",
    "current_revision",
    "head_revision",
]
