"""What a budget counts in when it is made (``worker.ledger.budget_ops``): what its batch, or
its provider that UTC day, booked before it, and the calls then in flight, brought under it.

Its own module because ``budget_ops`` holds the reservation and settlement of every claim,
and these run once a budget.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import func, literal, not_, select, update
from sqlalchemy.engine import Connection

from worker.ledger.budget_scopes import SEPARATOR, scope_token
from worker.ledger.models import calls, jobs
from worker.ledger.rows import SENT_STATUSES

__all__ = [
    "DAY_PREFIX",
    "batch_calls",
    "bring_in_flight",
    "day_calls",
    "not_under",
    "spent_so_far",
    "spent_that_day",
]

#: A provider's daily ceiling's scope begins so (``day:faux:2026-12-05``).
DAY_PREFIX: Final = "day:"


def batch_calls(batch: str) -> Any:
    """The calls of a batch's jobs (through the jobs' batch index, not a scan of calls)."""
    return calls.c.job_id.in_(select(jobs.c.job_id).where(jobs.c.batch == batch))


def not_under(scope: str) -> Any:
    """Calls not brought or reserved under ``scope`` (not one of their scopes)."""
    padded = literal(SEPARATOR) + func.coalesce(calls.c.budget_scopes, "") + literal(SEPARATOR)
    return not_(padded.contains(f"{SEPARATOR}{scope_token(scope)}{SEPARATOR}", autoescape=True))


def spent_so_far(conn: Connection, batch: str, *, outside: str | None = None) -> float:
    """Known costs a batch booked before its budget existed (counted in from the start);
    ``outside``: only of calls not under that scope."""
    which = (jobs.c.batch == batch) & calls.c.status.in_(sorted(SENT_STATUSES))
    if outside is not None:
        which = which & not_under(outside)
    stmt = (
        select(func.coalesce(func.sum(calls.c.cost_usd), 0.0))
        .join(jobs, jobs.c.job_id == calls.c.job_id)
        .where(which)
    )
    return float(conn.execute(stmt).scalar_one())


def day_calls(scope: str) -> Any:
    """The calls of a ``day:`` scope: its provider's, claimed that (UTC) day; None for a
    scope ``day_scope`` did not make."""
    provider, _, day = scope[len(DAY_PREFIX) :].rpartition(":")
    try:
        start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (
        (calls.c.provider == provider)
        & (calls.c.claimed_at >= start)
        & (calls.c.claimed_at < start + timedelta(days=1))
    )


def spent_that_day(conn: Connection, scope: str) -> float:
    """Known costs the provider of a ``day:`` scope booked that (UTC) day, by the claims'
    times: a ceiling first met in the afternoon counts the morning (found by an attack: it
    started at $0, and the day's spend passed it). Once a day a provider: no index needed."""
    day = day_calls(scope)
    if day is None:  # not a scope ``day_scope`` made: nothing to count it by
        return 0.0
    # Not the calls under it: ``bring_in_flight`` ran first, and those settle into it.
    stmt = select(func.coalesce(func.sum(calls.c.cost_usd), 0.0)).where(
        day & calls.c.status.in_(sorted(SENT_STATUSES)) & not_under(scope)
    )
    return float(conn.execute(stmt).scalar_one())


def bring_in_flight(conn: Connection, scope: str, which: Any) -> float:
    """Bring the calls in flight (``claimed``) that ``which`` selects under a budget just
    made, and return what they reserved already (under another budget): counted in now, as
    each settles its cost into it later (``settle``). Found by an attack: a budget set on a
    running batch counted only settled calls, the 40 in flight settled into no budget, and
    the batch spent 3.4 times a limit it had passed before its next claim. One without a
    reservation is brought in at 0: what it will cost is not known until it settles."""
    # One statement, which reads what it brings in: a separate sum could count a call that
    # settled before the update (never brought in: counted for ever) or miss one claimed
    # between the two (brought in, its reservation then settled out of a budget that never
    # counted it).
    brought = conn.execute(
        update(calls)
        .where(which & (calls.c.status == "claimed"))
        .values(
            budget_scopes=func.trim(
                func.coalesce(calls.c.budget_scopes, "") + SEPARATOR + scope_token(scope)
            ),
            reserved_usd=func.coalesce(calls.c.reserved_usd, 0.0),
        )
        .returning(calls.c.reserved_usd)
    )
    return float(sum(brought.scalars()))
