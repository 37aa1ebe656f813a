"""Ledger figures for ``decisions status``: three aggregate queries, no row is loaded."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import distinct, func, select
from sqlalchemy.engine import Connection

from worker.ledger.models import calls, jobs
from worker.ledger.rows import LOCAL_PROVIDER, SENT_STATUSES, LedgerStatus

__all__ = ["ledger_status"]


def ledger_status(conn: Connection, batch: str | None = None) -> LedgerStatus:
    job_stmt = select(
        jobs.c.terminal_type,
        jobs.c.terminal_reason,
        func.count(),
        func.count(jobs.c.published_at),
    ).group_by(jobs.c.terminal_type, jobs.c.terminal_reason)
    # A local tool or handler run is a call (claimed at most once) but no request: it is
    # neither counted as sent nor paid for.
    requests = calls.c.provider != LOCAL_PROVIDER
    call_stmt = select(
        calls.c.status,
        calls.c.cost_basis,
        func.count(),
        func.sum(calls.c.cost_usd),
        func.count(calls.c.cost_usd),
        func.sum(calls.c.claims),
    ).where(requests).group_by(calls.c.status, calls.c.cost_basis)
    # A packed request is one request however many jobs' calls it answered.
    pack_stmt = select(func.count(), func.count(distinct(calls.c.pack_id))).where(
        calls.c.pack_id.is_not(None) & calls.c.status.in_(sorted(SENT_STATUSES)) & requests
    )
    if batch is not None:
        job_stmt = job_stmt.where(jobs.c.batch == batch)
        call_stmt = call_stmt.join(jobs, jobs.c.job_id == calls.c.job_id).where(
            jobs.c.batch == batch
        )
        pack_stmt = pack_stmt.join(jobs, jobs.c.job_id == calls.c.job_id).where(
            jobs.c.batch == batch
        )

    total = open_ = unpublished = 0
    by_type: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    for terminal_type, reason, count, published in conn.execute(job_stmt):
        total += count
        if terminal_type is None:
            open_ += count
            continue
        by_type[terminal_type] += count
        unpublished += count - published
        if reason is not None:
            by_reason[f"{terminal_type}:{reason}"] += count

    by_status: Counter[str] = Counter()
    by_basis: Counter[str] = Counter()
    cost: dict[str, float | None] = {}
    sent = claims = 0
    for status, basis, count, cost_sum, costed, claim_sum in conn.execute(call_stmt):
        by_status[status] += count
        claims += int(claim_sum or 0)
        if status not in SENT_STATUSES:
            continue
        sent += count
        key = basis or "unknown"
        by_basis[key] += count
        if costed:
            cost[key] = (cost.get(key) or 0.0) + float(cost_sum)
        else:
            # Calls with no cost at all: the sum is unknown, not 0.
            cost.setdefault(key, None)

    packed_calls, packs = conn.execute(pack_stmt).one()
    return LedgerStatus(
        batch=batch,
        jobs_total=total,
        jobs_open=open_,
        jobs_by_type=dict(by_type),
        jobs_by_reason=dict(by_reason),
        jobs_unpublished=unpublished,
        calls_by_status=dict(by_status),
        calls_by_basis=dict(by_basis),
        cost_by_basis=cost,
        requests_sent=sent - packed_calls + packs,
        calls_sent=sent,
        requests_packed=packs,
        claims_total=claims,
    )
