"""Rewriting a reply stream that lost its entries, from the ledger (``decisions ledger
republish``).

The ledger keeps every finished job's terminal message (the outbox). For a reply stream
that lost entries (a Redis restarted without persistence, a stream deleted), this
publishes again each stored message of the jobs that reply there, and each of their
escalations to the escalation stream unless the job was resolved, with
``shared.streams.republish``: a message whose marker still points at an entry that exists
is left alone, so every message is on its stream at most once, however often this runs.

"Resolved" is judged twice: by Redis's resolved record (in the Lua call) and by the ledger's
resolutions (every resolution, labels or not, reaches the ledger through
``worker.calibration``; one stored before revision 0006 by its labels). A Redis that
forgot everything forgot its resolved records too: without the ledger's word, a job a
reviewer had resolved went back on the escalation stream and a second reviewer resolved it
with another answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
import sqlalchemy as sa

from shared import keys
from shared.streams import ESCALATION_ADDED, REPLY_ADDED, Publication, republish
from worker.delivery.audits import audit_json
from worker.ledger import JobRow, Ledger
from worker.ledger.models import jobs, labels, resolutions

__all__ = ["RepublishReport", "republish_stream", "stored_messages"]

#: Jobs read from the ledger, and published, per round trip.
PAGE = 500


@dataclass
class RepublishReport:
    """What a republish did: jobs read, entries written, and what Redis refused."""

    jobs: int = 0
    replies: int = 0
    escalations: int = 0
    failures: list[str] = field(default_factory=list)


def stored_messages(
    ledger: Ledger, stream: str, *, since: datetime | None = None, page: int = PAGE
) -> Iterator[list[Publication]]:
    """The stored terminal messages of jobs replying to ``stream`` (finished at or after
    ``since``), oldest first, a page at a time; read-only."""
    # A resolution of the job's escalation (or of its audit); a label of it says so too (a
    # resolution stored before revision 0006 has only its labels).
    resolved = sa.or_(
        sa.exists().where(resolutions.c.job_id == jobs.c.job_id),
        sa.exists().where(labels.c.job_id == jobs.c.job_id),
    ).label("resolved")
    columns = (jobs.c.job_id, jobs.c.terminal_type, jobs.c.terminal_message, jobs.c.finished_at,
               jobs.c.job_json, resolved)
    where = [jobs.c.reply_to == stream, jobs.c.terminal_message.is_not(None)]
    if since is not None:
        where.append(jobs.c.finished_at >= since)
    after: tuple[datetime, str] | None = None
    while True:
        query = sa.select(*columns).where(*where)
        if after is not None:
            query = query.where(sa.tuple_(jobs.c.finished_at, jobs.c.job_id) > after)
        query = query.order_by(jobs.c.finished_at, jobs.c.job_id).limit(page)
        with ledger.engine.connect() as conn:
            rows = conn.execute(query).all()
        if not rows:
            return
        yield [
            Publication(
                stream=stream,
                job_id=row.job_id,
                message_type=row.terminal_type,
                message_json=row.terminal_message,
                escalation=row.terminal_type == "escalation" and not row.resolved,
                audit_json=None if row.resolved else _audit(row),
            )
            for row in rows
        ]
        after = (rows[-1].finished_at, rows[-1].job_id)


def _audit(row: Any) -> str | None:
    """A result's audit escalation, rebuilt as its first publish built it."""
    if row.terminal_type != "result":
        return None
    return audit_json(
        JobRow(
            job_id=row.job_id, kind="decide", batch=None, reply_to="", fingerprint="",
            deadline=row.finished_at, job_json=row.job_json, created_at=row.finished_at,
            terminal_type=row.terminal_type, terminal_reason=None,
            terminal_message=row.terminal_message, finished_at=row.finished_at,
            published_at=None,
        )
    )


def republish_stream(
    ledger: Ledger,
    client: redis.Redis,
    stream: str,
    *,
    since: datetime | None = None,
    ttl_s: int = 7 * 24 * 3600,
    escalation_stream: str = keys.ESCALATION_STREAM,
) -> RepublishReport:
    """Write again to ``stream`` (a reply stream name) every stored message it lacks."""
    keys.reply_stream(stream)  # a name that is not one fails here, before any work
    report = RepublishReport()
    for publications in stored_messages(ledger, stream, since=since):
        report.jobs += len(publications)
        answers = republish(client, publications, ttl_s=ttl_s, escalation_stream=escalation_stream)
        for answer in answers:
            if isinstance(answer, Exception):
                report.failures.append(str(answer))
                continue
            report.replies += bool(answer & REPLY_ADDED)
            report.escalations += bool(answer & ESCALATION_ADDED)
    return report
