"""The ledger's own refinements of ``shared.errors.LedgerError``.

Both stay inside the one exception tree: ``except LedgerError`` still catches them.
"""

from __future__ import annotations

from shared.errors import LedgerError
from worker.ledger.rows import CallRow

__all__ = ["CallNotFound", "ClaimLost", "JobNotFound"]


class CallNotFound(LedgerError):
    """No call row has that (job id, step): it was never claimed."""

    def __init__(self, job_id: str, step: str) -> None:
        self.job_id = job_id
        self.step = step
        super().__init__(f"no call {step!r} was claimed for job {job_id}")


class ClaimLost(LedgerError):
    """An outcome arrived for a call that is no longer ``claimed``.

    Usually a reaper found the lease over and booked the call ``unknown`` while the request
    was still running. The stored row wins (it may already have been escalated), so nothing
    was written; ``call`` is the row as stored.
    """

    def __init__(self, call: CallRow, attempted: str) -> None:
        self.call = call
        self.attempted = attempted
        super().__init__(
            f"call {call.step!r} of job {call.job_id} is {call.status}, not claimed: "
            f"outcome {attempted!r} not recorded"
        )


class JobNotFound(LedgerError):
    """No job row has that id: ``open_job`` was never called for it."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} is not in the ledger (open_job it first)")
