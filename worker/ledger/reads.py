"""The ledger's read API for its observers: the console's batch pages and the metrics' gauges.

Aggregates only, each in a read-only transaction (``READ_ONLY``): nothing here writes or
loads a job's body. The callers shape the rows into what they show; the tables and their
columns stay the ledger's own (``worker.ledger.models``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from worker.ledger.engine import READ_ONLY
from worker.ledger.models import calls, jobs
from worker.ledger.outbox_rows import OUTBOX_GRACE_S
from worker.ledger.rows import SENT_STATUSES
from worker.ledger.store import Ledger

__all__ = [
    "BatchDetail",
    "CallGauges",
    "batch_detail",
    "batch_rows",
    "call_gauges",
]


@contextmanager
def _reading(ledger: Ledger) -> Iterator[Connection]:
    with ledger.engine.connect() as conn:
        conn.execution_options(**{READ_ONLY: True})
        with conn.begin():
            yield conn


@dataclass(frozen=True)
class CallGauges:
    """Two indexed counts and a group-by: cheap enough for every metrics scrape."""

    calls_by_status: dict[str, int]
    #: Claimed calls whose lease ran out before ``now``.
    claims_expired: int
    #: Jobs finished more than ``OUTBOX_GRACE_S`` before ``now`` whose message is still not
    #: marked published: the outbox backlog, which the reaper's relay publishes.
    jobs_unpublished: int


def call_gauges(ledger: Ledger, now: datetime) -> CallGauges:
    by_status = select(calls.c.status, func.count()).group_by(calls.c.status)
    expired = select(func.count()).where(
        and_(calls.c.status == "claimed", calls.c.lease_expires < now)
    )
    # Not every finished job unmarked: under steady traffic some always are, between their
    # publish and the group commit that carries their mark, and the backlog alert (> 0 for
    # ten minutes) fired on a healthy fleet.
    unpublished = select(func.count()).where(
        and_(
            jobs.c.terminal_type.is_not(None),
            jobs.c.published_at.is_(None),
            jobs.c.finished_at < now - timedelta(seconds=OUTBOX_GRACE_S),
        )
    )
    with ledger.engine.connect() as conn:
        counts = {str(status): int(n) for status, n in conn.execute(by_status)}
        return CallGauges(
            calls_by_status=counts,
            claims_expired=int(conn.execute(expired).scalar_one()),
            jobs_unpublished=int(conn.execute(unpublished).scalar_one()),
        )


def batch_rows(ledger: Ledger) -> list[tuple[Any, ...]]:
    """``(batch, terminal_type, jobs, first created, last finished)`` per batch and type
    (``terminal_type`` None: still open; ``batch`` None: jobs without one)."""
    stmt = select(
        jobs.c.batch,
        jobs.c.terminal_type,
        func.count(),
        func.min(jobs.c.created_at),
        func.max(jobs.c.finished_at),
    ).group_by(jobs.c.batch, jobs.c.terminal_type)
    with _reading(ledger) as conn:
        return [tuple(row) for row in conn.execute(stmt).all()]


@dataclass(frozen=True)
class BatchDetail:
    """One batch's rows, read in one transaction (the jobs and the costs agree)."""

    #: ``(job_id, created_at, finished_at, terminal_type, terminal_reason)`` of each job.
    jobs: list[tuple[Any, ...]]
    #: ``(provider, cost basis, sent calls, summed cost, calls with a cost)`` of the batch's
    #: sent calls, by provider and basis.
    costs: list[tuple[Any, ...]]


def batch_detail(ledger: Ledger, batch: str) -> BatchDetail:
    job_stmt = select(
        jobs.c.job_id,
        jobs.c.created_at,
        jobs.c.finished_at,
        jobs.c.terminal_type,
        jobs.c.terminal_reason,
    ).where(jobs.c.batch == batch)
    cost_stmt = (
        select(
            calls.c.provider,
            calls.c.cost_basis,
            func.count(),
            func.sum(calls.c.cost_usd),
            func.count(calls.c.cost_usd),
        )
        .join(jobs, jobs.c.job_id == calls.c.job_id)
        .where(jobs.c.batch == batch, calls.c.status.in_(sorted(SENT_STATUSES)))
        .group_by(calls.c.provider, calls.c.cost_basis)
    )
    with _reading(ledger) as conn:
        return BatchDetail(
            jobs=[tuple(row) for row in conn.execute(job_stmt)],
            costs=[tuple(row) for row in conn.execute(cost_stmt)],
        )
