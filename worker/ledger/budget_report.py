"""Budget figures for ``decisions ledger status``, the console and the metrics: aggregates only.

For one budget: its limit and committed total (the row), and how the committed total splits:
reserved by calls in flight, held whole for calls whose cost stayed unknown (or whose outcome
was lost: their booked cost is a guess), and booked by basis (reported, estimate). A batch's
budget also counts the known costs the batch booked before the budget existed (``budget_ops``):
``spent_before_usd``."""

from __future__ import annotations

from sqlalchemy import case, func, literal, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from worker.ledger.budget_ops import BATCH_PREFIX, EXHAUSTED, read_budget
from worker.ledger.budget_scopes import SEPARATOR, scope_token
from worker.ledger.models import budgets, calls, jobs
from worker.ledger.rows import SENT_STATUSES, BudgetStatus

__all__ = ["budget_status", "live_budgets"]


def _covers(scope: str) -> ColumnElement[bool]:
    """Calls reserved against ``scope`` (one of their scopes' tokens, ``budget_scopes``)."""
    padded = literal(SEPARATOR) + calls.c.budget_scopes + literal(SEPARATOR)
    return padded.contains(f"{SEPARATOR}{scope_token(scope)}{SEPARATOR}", autoescape=True)


def budget_status(conn: Connection, scope: str) -> BudgetStatus | None:
    row = read_budget(conn, scope)
    if row is None:
        return None
    covered = _covers(scope)
    if scope.startswith(BATCH_PREFIX):
        # Through the batch's jobs (indexed), not a scan of every call.
        of_batch = select(jobs.c.job_id).where(jobs.c.batch == scope[len(BATCH_PREFIX) :])
        covered = covered & calls.c.job_id.in_(of_batch)
    stmt = (
        select(
            calls.c.status,
            calls.c.cost_basis,
            calls.c.cost_usd.is_(None),
            func.count(),
            func.sum(calls.c.reserved_usd),
            func.sum(calls.c.cost_usd),
            # What a lost call with a booked guess holds (budget_ops.charge): the larger.
            func.sum(
                case(
                    (calls.c.cost_usd > calls.c.reserved_usd, calls.c.cost_usd),
                    else_=calls.c.reserved_usd,
                )
            ),
        )
        .where(covered)
        .group_by(calls.c.status, calls.c.cost_basis, calls.c.cost_usd.is_(None))
    )
    reserved = held = 0.0
    in_flight = unknown = 0
    booked: dict[str, float] = {}
    for status, basis, no_cost, count, reserved_sum, cost_sum, larger in conn.execute(stmt):
        if status == "claimed":
            reserved += float(reserved_sum or 0.0)
            in_flight += int(count)
        elif status in SENT_STATUSES and no_cost:
            held += float(reserved_sum or 0.0)
            unknown += int(count)
        elif status == "unknown":  # outcome lost: its booked cost is a guess
            held += float(larger or 0.0)
            unknown += int(count)
        elif status in SENT_STATUSES:
            key = basis or "unknown"
            booked[key] = booked.get(key, 0.0) + float(cost_sum or 0.0)
    exhausted = 0
    if scope.startswith(BATCH_PREFIX):
        exhausted = int(
            conn.execute(
                select(func.count()).where(
                    (jobs.c.batch == scope[len(BATCH_PREFIX) :])
                    & (jobs.c.terminal_reason == EXHAUSTED)
                )
            ).scalar_one()
        )
    committed = float(row.committed_usd)
    before = committed - reserved - held - sum(booked.values())
    return BudgetStatus(
        scope=scope,
        limit_usd=row.limit_usd,
        committed_usd=committed,
        reserved_usd=round(reserved, 12),
        calls_in_flight=in_flight,
        held_unknown_usd=round(held, 12),
        calls_unknown_cost=unknown,
        booked_by_basis={k: round(v, 12) for k, v in sorted(booked.items())},
        spent_before_usd=max(0.0, round(before, 12)),
        jobs_exhausted=exhausted,
    )


def live_budgets(conn: Connection, limit: int = 20) -> list[BudgetStatus]:
    """The budgets changed most recently (at most ``limit``): what the metrics export."""
    scopes = conn.execute(
        select(budgets.c.scope).order_by(budgets.c.updated_at.desc(), budgets.c.scope).limit(limit)
    ).scalars()
    found = [budget_status(conn, scope) for scope in list(scopes)]
    return [status for status in found if status is not None]
