"""The ledger's budget methods (``Ledger`` inherits them): set, read and resume budgets,
each in one committed transaction. Reserving and settling happen inside the claim's and the
record's own transactions (``call_ops``, ``budget_ops``), never here."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime

import structlog
from sqlalchemy.engine import Connection

from worker.ledger import budget_ops
from worker.ledger.budget_late import (
    LATE_CLAIMS_WAIT_S,
    count_late_claims,
    uncounted_warning,
    wait_for_older,
)
from worker.ledger.budget_report import budget_status, live_budgets
from worker.ledger.conflicts import conflicts_retried, retry_conflicts
from worker.ledger.rows import BudgetStatus, JobRow

__all__ = ["BudgetMethods"]

log = structlog.get_logger("decisions.budgets")


def _logged(line: str) -> None:
    log.warning("budget.late_claims_uncounted", message=line)


class BudgetMethods:
    """Budget methods over ``transaction`` and ``now`` (``Ledger``'s)."""

    def transaction(self, *, read_only: bool = False) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def now(self) -> datetime:
        raise NotImplementedError

    def set_budget(
        self,
        batch: str,
        usd: float,
        *,
        wait_s: float = LATE_CLAIMS_WAIT_S,
        warn: Callable[[str], None] | None = None,
    ) -> BudgetStatus:
        """Set the batch's budget (raise or lower it; lowering cancels nothing already sent,
        it only refuses later requests); its figures after.

        Made now on PostgreSQL, it also counts the claims that read "no budget" before and
        committed after (``budget_late``), waiting up to ``wait_s`` for them; sessions still
        in a transaction then are named in one line to ``warn`` (else logged)."""
        scope = budget_ops.batch_scope(batch)

        def set_limit() -> tuple[float | None, bool]:
            with self.transaction() as conn:
                spent = budget_ops.set_limit(conn, scope, usd, self.now())
                return spent, conn.dialect.name == "sqlite"  # no claim reads between writes

        def count_late(spent: float) -> None:
            with self.transaction() as conn:
                count_late_claims(conn, batch, spent, self.now())

        # Each transaction run again whole on a conflict (worker.ledger.conflicts): a
        # deadlock with a claim reserving from this budget is no outage (found by an attack).
        spent, serial = retry_conflicts(set_limit, operation="set_budget")
        if spent is not None and not serial:
            pids = wait_for_older(self.transaction, wait_s)
            if pids:
                (warn or _logged)(uncounted_warning(batch, pids, wait_s))
            retry_conflicts(lambda: count_late(spent), operation="set_budget")
        with self.transaction(read_only=True) as conn:
            found = budget_status(conn, scope)
        assert found is not None
        return found

    def budget(self, batch: str) -> BudgetStatus | None:
        """The batch's budget figures; None if it has no budget."""
        with self.transaction(read_only=True) as conn:
            return budget_status(conn, budget_ops.batch_scope(batch))

    def budget_of_scope(self, scope: str) -> BudgetStatus | None:
        with self.transaction(read_only=True) as conn:
            return budget_status(conn, scope)

    def budgets(self, limit: int = 50) -> list[BudgetStatus]:
        """The budgets changed most recently, with their figures."""
        with self.transaction(read_only=True) as conn:
            return live_budgets(conn, limit)

    def exhausted_jobs(self, batch: str) -> list[str]:
        """Ids of the batch's jobs escalated ``budget_exhausted``."""
        with self.transaction(read_only=True) as conn:
            return budget_ops.exhausted_jobs(conn, batch)

    @conflicts_retried
    def reopen_exhausted(
        self,
        batch: str,
        *,
        only: frozenset[str] | None = None,
        keep: Callable[[JobRow], bool] | None = None,
    ) -> list[JobRow]:
        """Reopen the batch's jobs escalated ``budget_exhausted`` (and those reopened before
        and not finished yet); of the escalated, only those in ``only`` when given; none
        that ``keep`` refuses. For ``decisions budget resume``."""
        with self.transaction() as conn:
            return budget_ops.reopen_exhausted(conn, batch, self.now(), only=only, keep=keep)
