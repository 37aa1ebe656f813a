"""The ledger's own refinements of ``shared.errors.LedgerError``.

All stay inside the one exception tree: ``except LedgerError`` still catches them::

    LedgerError (shared.errors)
    ├── LedgerUnavailable   the database cannot be reached, takes no writes now (read-only,
    │   │                   disk full, too many connections) or stayed locked: retry later
    │   └── LedgerConflict  PostgreSQL aborted the transaction for a conflict with another
    │                       (deadlock 40P01, serialization failure 40001): run it again now
    ├── TablesMissing       the ledger's tables are not there: never migrated, or dropped (a
    │                       SchemaBehind too: `decisions migrate`, or a restore of the rows)
    ├── NotADatabase        the ledger URL names a file that is not SQLite's (and a
    │                       ConfigurationError: the setting must change, no retry mends it)
    ├── OverServerLimit     PostgreSQL refused a statement past one of its program limits
    │                       (SQLSTATE class 54): the same statement meets it again
    ├── ClaimLost           an outcome for a call that is no longer claimed (not written)
    ├── JobFinished         a claim for a job whose terminal message is stored (not claimed)
    ├── OverBudget          a claim whose worst case does not fit a budget (not claimed)
    ├── PlannedOtherwise    a claim of a job an earlier delivery planned otherwise (not claimed)
    ├── CallNotFound        no such call was ever claimed (a bug in the caller)
    └── JobNotFound         no such job was ever opened (a bug in the caller)

Only ``LedgerUnavailable`` is worth retrying as such; the others say something about the
rows, which a retry of the same step will not change. A ``LedgerConflict`` the ledger runs
again itself, at once (``worker.ledger.conflicts``); one that outlasts those few tries is
handled as the outage it then is.
"""

from __future__ import annotations

from typing import ClassVar

from shared.errors import ConfigurationError, LedgerError, SchemaBehind
from worker.ledger.rows import BudgetRefusal, CallRow, JobRow

__all__ = [
    "CallNotFound",
    "ClaimLost",
    "JobFinished",
    "JobNotFound",
    "LedgerConflict",
    "LedgerUnavailable",
    "NotADatabase",
    "OverBudget",
    "OverServerLimit",
    "PlannedOtherwise",
    "TablesMissing",
]


class LedgerUnavailable(LedgerError):
    """The ledger's database cannot be reached or take writes now (PostgreSQL read-only, out of
    disk or connections, shutting down), or SQLite stayed locked past the busy timeout.

    Nothing was committed by the statement that failed; the caller must not send.
    """


class LedgerConflict(LedgerUnavailable):
    """PostgreSQL aborted the transaction for a conflict with another one running beside it:
    a deadlock (40P01 ``deadlock_detected``: each waited for a row the other had locked, as
    two group commits claiming the same judgment jobs in crossing orders do) or a
    serialization failure (40001). ``sqlstate`` says which.

    The server is up and nothing of the transaction was committed; the other transaction
    ends in moments, and the same transaction run again then goes through, seeing what the
    other committed. So the ledger runs it again itself, a few times after a short pause
    (``worker.ledger.conflicts``), rather than holding the work as after an outage.

    A ``LedgerUnavailable`` still: one that outlasts those tries is handled as an outage is
    (the task retried with backoff, a paid answer held until written), as every conflict
    was before it had a name of its own."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self) -> tuple[type[LedgerConflict], tuple[str, str]]:
        # Both arguments: the default rebuilds an exception from ``args`` (the message) alone.
        return type(self), (str(self), self.sqlstate)


class TablesMissing(SchemaBehind):
    """The ledger's tables are not there: a database never migrated, or one whose tables were
    dropped. A worker checked them at its start, so when it meets this afterwards they were
    dropped under it, and with them the claims that keep a call from being sent twice.

    A ``SchemaBehind`` still: whatever waits for ``decisions migrate`` waits for this too."""


class NotADatabase(LedgerError, ConfigurationError):
    """The ledger URL names a file that is not a SQLite database (a text file, say).

    A ``ConfigurationError`` too: no retry mends it, the setting is what must change, so
    commands refuse with their usage status and a worker does not start."""


class OverServerLimit(LedgerError):
    """PostgreSQL refused a statement past one of its program limits (SQLSTATE class 54:
    54001 statement too complex or the stack depth limit, 54011 too many columns, 54023 too
    many arguments, 54000 an index row or value too large, ...).

    No outage: the server is up and answered, and the same statement meets the same limit on
    every try, so it is not retried (a ``LedgerUnavailable`` retried it for ever, holding
    answers and saying "unavailable"). Nothing was committed by it.

    Its message says all an operator needs: a worker logs its failed task without a
    traceback (``worker.process.logs.SAYS_ITSELF``)."""

    says_itself: ClassVar[bool] = True


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


class JobFinished(LedgerError):
    """A claim for a call of a job that already stored its terminal message.

    Nothing was claimed: a request sent now would be paid for and its answer thrown away.
    ``job`` is the stored row; publish its message.
    """

    def __init__(self, job: JobRow) -> None:
        self.job = job
        super().__init__(f"job {job.job_id} is finished ({job.terminal_type}): nothing claimed")


class OverBudget(LedgerError):
    """A claim whose request's worst case does not fit a budget covering it (or that has no
    known maximum under one). Nothing was claimed or reserved; ``refusal`` has the figures.
    """

    def __init__(self, refusal: BudgetRefusal) -> None:
        self.refusal = refusal
        super().__init__(refusal.detail())


class PlannedOtherwise(LedgerError):
    """A claim that names the calls its delivery plans (``plan``) for a job holding a call
    that plan does not make: another step, or another request for the step (the worker's
    settings changed between deliveries, so items were packed otherwise). Nothing was
    claimed: the stored call may have carried items this claim's request would carry again.
    ``step`` names the stored call."""

    def __init__(self, job_id: str, step: str) -> None:
        self.job_id = job_id
        self.step = step
        super().__init__(f"job {job_id} holds {step}, which this delivery does not plan")
