"""Rewriting a reply stream that lost its entries, from the ledger (``decisions ledger
republish``).

The ledger keeps every finished job's terminal message (the outbox). For a reply stream
that lost entries (a Redis restarted without persistence, a stream deleted), this
publishes again each stored message of the jobs that reply there, and each of their
escalations to the escalation stream unless the job was resolved, with
``shared.streams.republish``: a message whose marker still points at an entry that exists
is left alone, and so is one the streams still hold after its marker expired (each stream is
read once a run; found by an attack: a week after the first publish, every run wrote every
message again), so every message is on its stream at most once, however often this runs.

"Resolved" is judged twice: by Redis's resolved record (in the Lua call) and by the ledger's
resolutions (every resolution, labels or not, reaches the ledger through
``worker.calibration``; one stored before revision 0006 by its labels). A Redis that
forgot everything forgot its resolved records too: without the ledger's word, a job a
reviewer had resolved went back on the escalation stream and a second reviewer resolved it
with another answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
import sqlalchemy as sa

from shared import keys
from shared.streams import ESCALATION_ADDED, REPLY_ADDED, Publication, read_entries, republish
from worker.delivery.audits import audit_json
from worker.ledger import JobRow, Ledger
from worker.ledger.models import jobs, labels, resolutions

__all__ = ["RepublishReport", "republish_stream", "stored_messages"]

#: Jobs read from the ledger, and published, per round trip.
PAGE = 500
#: How far before ``since`` the stream is read: Redis's clock (its entry ids) may run behind.
_CLOCK_SLACK_MS = 600_000


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
               jobs.c.job_json, jobs.c.resumes, resolved)
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
                # A resumed job's message went out under a marker of its own (its first one
                # holds the message before it), as ``worker.delivery.outbox`` publishes it.
                marker=None if row.resumes == 0 else f"resume.{row.resumes}:{row.job_id}",
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
    after = _read_from(since)
    replies = {
        (entry.job_id, _digest(entry.message)): entry.entry_id
        for entry in read_entries(client, keys.reply_stream(stream), after=after)
    }
    escalated = {
        entry.job_id: entry.entry_id
        for entry in read_entries(client, escalation_stream, after=after)
    }
    for page in stored_messages(ledger, stream, since=since):
        report.jobs += len(page)
        _mark_held(client, page, replies, escalated, ttl_s)
        answers = republish(client, page, ttl_s=ttl_s, escalation_stream=escalation_stream)
        for answer in answers:
            if isinstance(answer, Exception):
                report.failures.append(str(answer))
                continue
            report.replies += bool(answer & REPLY_ADDED)
            report.escalations += bool(answer & ESCALATION_ADDED)
    return report


def _digest(message: str) -> bytes:
    return hashlib.blake2b(message.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _read_from(since: datetime | None) -> str:
    """Where the streams are read from: entries ten minutes older than ``since`` count, for a
    clock of Redis's (its entry ids) behind the ledger's."""
    if since is None:
        return "-"
    return f"{max(0, int(since.timestamp() * 1000) - _CLOCK_SLACK_MS)}-0"


def _mark_held(
    client: redis.Redis,
    page: list[Publication],
    replies: dict[tuple[str, bytes], str],
    escalated: dict[str, str],
    ttl_s: int,
) -> None:
    """Point the markers of what the streams still hold at it, so that the publish-once
    call (which trusts a marker whose entry exists) writes only what is missing.

    A marker says a message is on its stream only while it lives (``ttl_s``); the entries
    live until someone trims them: so each stream is read once a run (an operator's command,
    not the hot path; about 100 bytes an entry held), the reply stream by job id and message
    digest, the escalation stream by job id. Each is judged on its own: a deleted
    escalation stream comes back beside an intact reply stream."""
    with client.pipeline(transaction=False) as pipe:
        for publication in page:
            entry = replies.get((publication.job_id, _digest(publication.message_json)))
            if entry is not None:
                marker = keys.published_marker(
                    publication.stream, publication.job_id, marker=publication.marker
                )
                pipe.set(marker, entry, ex=ttl_s)
            held = escalated.get(publication.job_id)
            if held is not None and (publication.escalation or publication.audit_json):
                pipe.set(keys.escalation_marker(publication.job_id), held, ex=ttl_s)
        pipe.execute()
