"""Budgets that fail closed, as SQL on one connection (the claim's or the settle's transaction).

A budget is a row of ``budgets``: a batch's (``batch:<name>``, from a job's ``budget_usd`` or
``decisions budget set``) or a provider's daily ceiling (``day:<provider>:<YYYY-MM-DD>``, by
the ledger's clock, from settings). Its ``committed_usd`` is what its calls hold::

    claimed                        the reservation (the request's worst case)
    answered/failed, cost          the booked cost (reported or estimate)
    unknown, cost                  the larger of the booked cost and the reservation (a lost
                                   request's booking is a guess; its worst case stays held)
    answered/failed/unknown, null  the reservation, kept whole (never counted at 0)
    not_sent                       nothing (released)

- ``reserve``: in the claim's transaction, before a byte leaves. One conditional UPDATE a
  budget (``committed + worst <= limit``, to a micro-dollar): the database decides a race
  between workers (on PostgreSQL the second UPDATE waits for the first's commit and
  re-checks its WHERE on the new row), so no two claims can both take the last dollars. A
  budget it does not fit undoes what this reservation did and raises ``OverBudget``:
  nothing is claimed.
- ``settle``: in the transaction that records a call's outcome, the difference between what
  the call holds now and its reservation. A cost above the reservation (a provider charging
  more than its configured maximum) is booked as it is: the truth wins, and the budget then
  refuses every later claim.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

import structlog
from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from shared.prices import BUDGET_SLACK_USD
from worker.ledger.budget_counts import (
    DAY_PREFIX,
    batch_calls,
    bring_in_flight,
    day_calls,
    spent_so_far,
    spent_that_day,
)
from worker.ledger.budget_scopes import scopes_of, scopes_text
from worker.ledger.errors import OverBudget
from worker.ledger.models import budgets, jobs
from worker.ledger.rows import BudgetAsk, BudgetRefusal, CallRow, JobRow
from worker.ledger.sql import insert_if_absent

__all__ = [
    "BATCH_PREFIX",
    "DAY_PREFIX",
    "EXHAUSTED",
    "Reservation",
    "adjust",
    "applies",
    "batch_scope",
    "budgeted_batches",
    "ceil_usd",
    "charge",
    "day_scope",
    "exhausted_jobs",
    "read_budget",
    "release",
    "reopen_exhausted",
    "reserve",
    "set_limit",
    "settle",
]

log = structlog.get_logger("decisions.budgets")

BATCH_PREFIX: Final = "batch:"
#: The escalation reason of a job whose request did not fit a budget (nothing was sent).
EXHAUSTED: Final = "budget_exhausted"
#: Sums are rounded as costs are (far below a cent), so float noise never refuses a claim.
_DIGITS: Final = 12

_READ = select(budgets).where(budgets.c.scope == bindparam("b_scope"))
_RESERVE = (
    update(budgets)
    .where(
        (budgets.c.scope == bindparam("b_scope"))
        & budgets.c.limit_usd.is_not(None)
        & (
            budgets.c.committed_usd + bindparam("b_amount")
            <= budgets.c.limit_usd + BUDGET_SLACK_USD
        )
    )
    .values(
        committed_usd=budgets.c.committed_usd + bindparam("b_amount"),
        updated_at=bindparam("b_now"),
    )
)
_ADJUST = (
    update(budgets)
    .where(budgets.c.scope == bindparam("b_scope"))
    .values(
        committed_usd=budgets.c.committed_usd + bindparam("b_amount"),
        updated_at=bindparam("b_now"),
    )
)
_SET_LIMIT = (
    update(budgets)
    .where(budgets.c.scope == bindparam("b_scope"))
    .values(limit_usd=bindparam("b_limit"), updated_at=bindparam("b_now"))
)


def batch_scope(batch: str) -> str:
    return BATCH_PREFIX + batch


def day_scope(provider: str, now: datetime) -> str:
    """A provider's daily ceiling, for the ledger's UTC day of ``now``."""
    return f"{DAY_PREFIX}{provider}:{now.date().isoformat()}"


@dataclass(frozen=True)
class Reservation:
    """What a claim reserved: ``amount`` against each of ``scopes``."""

    amount: float
    scopes: tuple[str, ...]

    @property
    def scopes_text(self) -> str:
        return scopes_text(self.scopes)


def charge(status: str, cost_usd: float | None, reserved_usd: float) -> float:
    """What a call covered by a budget holds of it (the table in this module's docstring)."""
    if status == "not_sent":
        return 0.0
    if status == "claimed" or cost_usd is None:
        return reserved_usd
    if status == "unknown":
        # A lost request's booked cost is a guess from the request alone (a priced host's
        # input tokens, none of its output): the outcome is unknown, so the worst case stays.
        return max(cost_usd, reserved_usd)
    return cost_usd


def read_budget(conn: Connection, scope: str) -> Any:
    return conn.execute(_READ, {"b_scope": scope}).first()


def adjust(conn: Connection, scope: str, amount: float, now: datetime) -> None:
    """Add ``amount`` to what the budget holds (a count made outside a claim or a settle)."""
    conn.execute(_ADJUST, {"b_scope": scope, "b_amount": amount, "b_now": now})


def _ensure(
    conn: Connection, scope: str, limit: float, now: datetime, *, batch: str | None
) -> float | None:
    """Create the budget if it is not there, counting what was booked before it: a batch's
    by its batch, a day's by its provider that day. What it counted as spent (settled
    calls), if it made the budget; None if it was there."""
    if read_budget(conn, scope) is not None:
        return None
    made = insert_if_absent(
        conn, budgets, {"scope": scope, "limit_usd": limit, "committed_usd": 0.0, "updated_at": now}
    )
    if made is None:
        # Another claim made it since the read above, and counted what came before. Only the
        # maker counts: found by a fresh-clone CI run, where the loser of this race brought
        # the winner's reserved call in flight under the budget a second time, and its
        # settlement moved the budget twice.
        return None
    # In flight first, then what was spent outside it, each statement its own snapshot
    # (PostgreSQL): a call settling between them is then either brought in (its record
    # waits for this row lock, then settles into the budget) or settled first (the sum sees
    # it). The other order counted such a call nowhere (found by an attack).
    spent = flying = 0.0
    if batch is not None:
        flying = bring_in_flight(conn, scope, batch_calls(batch))
        spent = spent_so_far(conn, batch, outside=scope)
    elif scope.startswith(DAY_PREFIX):
        day = day_calls(scope)
        if day is not None:
            flying = bring_in_flight(conn, scope, day)
        spent = spent_that_day(conn, scope)
    if spent + flying:
        adjust(conn, scope, spent + flying, now)
    return spent


def set_limit(conn: Connection, scope: str, limit: float, now: datetime) -> float | None:
    """Set a budget's limit (created if absent). Lowering it cancels nothing already sent:
    it only refuses later claims. If it made the budget: what it counted as spent before
    (``budget_late`` needs it on PostgreSQL); else None."""
    batch = scope[len(BATCH_PREFIX) :] if scope.startswith(BATCH_PREFIX) else None
    spent = _ensure(conn, scope, limit, now, batch=batch)
    conn.execute(_SET_LIMIT, {"b_scope": scope, "b_limit": limit, "b_now": now})
    return spent


_BATCH_BUDGETS = select(budgets.c.scope).where(
    budgets.c.scope.in_(bindparam("b_scopes", expanding=True)) & budgets.c.limit_usd.is_not(None)
)


def budgeted_batches(conn: Connection, asks: Iterable[BudgetAsk | None]) -> set[str]:
    """Of the batches ``asks`` name, those with a budget: one SELECT for a whole group of
    claims, so that claims no budget covers cost nothing more."""
    names = sorted({a.batch for a in asks if a is not None and a.batch is not None})
    if not names:
        return set()
    found = conn.execute(_BATCH_BUDGETS, {"b_scopes": [batch_scope(n) for n in names]})
    return {scope[len(BATCH_PREFIX) :] for scope in found.scalars()}


def applies(conn: Connection, ask: BudgetAsk, budgeted: set[str] | None = None) -> bool:
    """Whether a budget covers the call (``budgeted``: ``budgeted_batches``, read before)."""
    if ask.batch_budget_usd is not None or ask.daily_ceiling_usd is not None:
        return True
    if ask.batch is None:
        return False
    if budgeted is None:
        budgeted = budgeted_batches(conn, [ask])
    return ask.batch in budgeted


def _scopes(conn: Connection, ask: BudgetAsk, provider: str, now: datetime) -> list[str]:
    scopes: list[str] = []
    if ask.batch is not None:
        scope = batch_scope(ask.batch)
        if ask.batch_budget_usd is not None:
            # A job's budget_usd creates the batch's budget; it never changes one already set
            # (``decisions budget set`` may have raised it since).
            _ensure(conn, scope, ask.batch_budget_usd, now, batch=ask.batch)
        row = read_budget(conn, scope)
        if row is not None and row.limit_usd is not None:
            scopes.append(scope)
    if ask.daily_ceiling_usd is not None:
        scope = day_scope(provider, now)
        _ensure(conn, scope, ask.daily_ceiling_usd, now, batch=None)
        # The fleet's setting of the moment is the ceiling (an operator may have changed it).
        conn.execute(_SET_LIMIT, {"b_scope": scope, "b_limit": ask.daily_ceiling_usd, "b_now": now})
        scopes.append(scope)
    return scopes


def reserve(
    conn: Connection, ask: BudgetAsk, *, provider: str, now: datetime
) -> Reservation | None:
    """Reserve ``ask.worst_usd`` against every budget covering the call; None if none does.

    ``OverBudget`` (with every reservation of this call undone) if a budget cannot take it,
    or if the request has no known maximum and a budget covers it."""
    scopes = _scopes(conn, ask, provider, now)
    if not scopes:
        return None
    worst = ask.worst_usd
    if worst is None or not math.isfinite(worst) or worst < 0:
        row = read_budget(conn, scopes[0])
        raise OverBudget(
            BudgetRefusal(
                scope=scopes[0],
                limit_usd=row.limit_usd,
                committed_usd=float(row.committed_usd),
                worst_usd=None,
                provider=provider,
                field=ask.field,
            )
        )
    amount = ceil_usd(worst)
    done: list[str] = []
    for scope in scopes:
        params = {"b_scope": scope, "b_amount": amount, "b_now": now}
        if conn.execute(_RESERVE, params).rowcount == 1:
            done.append(scope)
            continue
        release(conn, Reservation(amount, tuple(done)), now)
        row = read_budget(conn, scope)
        raise OverBudget(
            BudgetRefusal(
                scope=scope,
                limit_usd=row.limit_usd,
                committed_usd=float(row.committed_usd),
                worst_usd=amount,
                provider=provider,
                field=ask.field,
            )
        )
    return Reservation(amount, tuple(scopes))


def release(conn: Connection, reservation: Reservation | None, now: datetime) -> None:
    """Give a reservation back (a claim that did not happen after all)."""
    if reservation is None or not reservation.scopes:
        return
    conn.execute(
        _ADJUST,
        [{"b_scope": s, "b_amount": -reservation.amount, "b_now": now} for s in reservation.scopes],
    )


def settle(conn: Connection, settled: Iterable[CallRow], now: datetime) -> None:
    """Move each budget by what its calls, just closed (they were ``claimed``), hold now
    against what they reserved."""
    deltas: dict[str, float] = defaultdict(float)
    for call in settled:
        if call.reserved_usd is None or not call.budget_scopes:
            continue
        held = charge(call.status, call.cost_usd, call.reserved_usd)
        # (A call brought under a budget in flight reserved nothing: no overrun of its.)
        if held > call.reserved_usd > 0:
            log.warning(
                "budget.overrun",
                job_id=call.job_id,
                step=call.step,
                provider=call.provider,
                reserved_usd=call.reserved_usd,
                cost_usd=call.cost_usd,
            )
        for scope in scopes_of(call.budget_scopes):
            deltas[scope] += held - call.reserved_usd
    params = [
        {"b_scope": scope, "b_amount": round(delta, _DIGITS), "b_now": now}
        for scope, delta in sorted(deltas.items())
        if delta != 0
    ]
    if params:
        conn.execute(_ADJUST, params)


def exhausted_jobs(conn: Connection, batch: str) -> list[str]:
    stmt = select(jobs.c.job_id).where(
        (jobs.c.batch == batch) & (jobs.c.terminal_reason == EXHAUSTED)
    )
    return sorted(conn.execute(stmt).scalars())


def reopen_exhausted(
    conn: Connection,
    batch: str,
    now: datetime,
    *,
    only: frozenset[str] | None = None,
    keep: Callable[[JobRow], bool] | None = None,
) -> list[JobRow]:
    """Reopen the batch's jobs that escalated ``budget_exhausted`` (nothing was sent for
    them), so that running them again may send; with the jobs reopened before and not
    finished yet (a resume interrupted before it enqueued them). Each keeps its id and
    content; its deadline is moved to now plus the time it was given at first. Of the
    escalated, only those in ``only`` when given (their escalations withdrawn); jobs ``keep``
    refuses (a stored job that cannot be submitted again) are left as they are."""
    stmt = (
        select(jobs)
        .where(
            (jobs.c.batch == batch)
            & (
                ((jobs.c.terminal_type == "escalation") & (jobs.c.terminal_reason == EXHAUSTED))
                | (jobs.c.terminal_type.is_(None) & (jobs.c.resumes > 0))
            )
        )
        .order_by(jobs.c.job_id)
        .with_for_update()
    )
    reopened: list[JobRow] = []
    for found in conn.execute(stmt).all():
        row = JobRow(**found._mapping)
        if row.finished and only is not None and row.job_id not in only:
            continue
        if keep is not None and not keep(row):
            continue
        if not row.finished:
            reopened.append(row)
            continue
        span = max(row.deadline - row.created_at, timedelta(seconds=1))
        changes: dict[str, Any] = {
            "terminal_type": None,
            "terminal_reason": None,
            "terminal_message": None,
            "finished_at": None,
            "published_at": None,
            "resumes": row.resumes + 1,
            "deadline": now + span,
        }
        conn.execute(
            update(jobs)
            .where((jobs.c.job_id == row.job_id) & (jobs.c.terminal_reason == EXHAUSTED))
            .values(**changes)
        )
        reopened.append(replace(row, **changes))
    return reopened


def ceil_usd(usd: float) -> float:
    """``usd`` rounded up at the costs' precision: a reservation never falls short of it."""
    if usd >= 1e6:  # beyond any budget (and past what the scaling below keeps exact)
        return usd
    scale = 10**_DIGITS
    return math.ceil(usd * scale) / scale
