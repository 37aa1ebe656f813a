"""The SQL ledger: every paid call is claimed (committed) before it is sent, at most once.

``Ledger`` is the one entry point; rows come back as frozen snapshots (``JobRow``,
``CallRow``). The state machine of a call is drawn in ``call_ops``; SQLite and PostgreSQL
engine settings, and why, in ``engine``; schema versions in ``schema`` and ``migrations/``.
"""

from worker.ledger.errors import CallNotFound, ClaimLost, JobNotFound, LedgerUnavailable
from worker.ledger.pack_ops import MemberClaim, MemberFinish, PackClaim
from worker.ledger.rows import (
    CALL_STATUSES,
    OUTCOME_STATUSES,
    SENT_STATUSES,
    CallOutcome,
    CallRow,
    CallStatus,
    Claim,
    JobRow,
    LedgerStatus,
    OutcomeStatus,
)
from worker.ledger.schema import current_revision, head_revision
from worker.ledger.store import Ledger

__all__ = [
    "CALL_STATUSES",
    "OUTCOME_STATUSES",
    "SENT_STATUSES",
    "CallNotFound",
    "CallOutcome",
    "CallRow",
    "CallStatus",
    "Claim",
    "ClaimLost",
    "JobNotFound",
    "JobRow",
    "Ledger",
    "LedgerStatus",
    "LedgerUnavailable",
    "MemberClaim",
    "MemberFinish",
    "OutcomeStatus",
    "PackClaim",
    "current_revision",
    "head_revision",
]
