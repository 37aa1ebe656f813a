"""Fleet-wide figures, read cheaply: the ledger's call states, the escalations still open,
the Celery queue's depth and the workers answering. ``decisions status`` prints them and
each worker's metrics endpoint exports the first two at scrape time.

Cheap means: the ledger is asked two indexed counts (calls by status over their index; the
outbox backlog over its partial index), Redis two XINFOs, one XPENDING summary and one
ZRANGEBYSCORE (more only for entries found unreadable, below), the broker one passive queue
declaration. Nothing here loads a ledger row or mutates anything.

Escalations are counted as a reviewer can open them. A trim of the stream (``XTRIM``, an
operator capping its memory) removes entries the group may still hold as pending, and from
then on Redis's lag for the group goes on counting the removed entries nobody had read:
neither can ever be opened, so neither is counted. Once anything has left the stream, the
entries not handed to the group yet are counted by reading them (none to read when the group
has read up to the last entry, as every reviewer's read does); pending entries older than
the stream's first entry are read, ids and holders only, only while there are any. An entry
deleted from the middle of the stream (``XDEL``) while pending is still counted: telling it
would take reading every pending entry's body.

An entry no reviewer can answer (not JSON, not an escalation this version reads, no reply
stream: what a claim skips; or questions no answer can be checked against), which the
console and ``decisions escalations list`` report as unreadable, waits for nobody: counted
so, it kept ``DecisionsEscalationsWaiting`` up for good. Telling it takes its body, so the
readers that meet one record its id (``shared.escalation_unreadable``) and the
count here reads that record, not the bodies: one ZRANGEBYSCORE, and while it holds any
ids, one XPENDING of each in one round trip (at most ``MAX_UNREADABLE``), which passes over
the ids acknowledged since and tells who holds the rest. Those are counted as ``unreadable``,
not as waiting or claimed. One no reader has met yet (none has paged that far since it was
written) is still counted as waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from celery import Celery

from shared import keys
from shared.escalation_unreadable import MAX_UNREADABLE
from shared.escalations import QUEUE_CONSUMER
from worker.ledger import Ledger
from worker.ledger.reads import call_gauges

__all__ = [
    "EscalationCounts",
    "LedgerGauges",
    "QueueDepth",
    "WorkerInfo",
    "escalation_counts",
    "ledger_gauges",
    "queue_depth",
    "workers",
]


@dataclass(frozen=True)
class LedgerGauges:
    calls_by_status: dict[str, int] = field(default_factory=dict)
    #: Claimed calls whose lease ran out: a worker died mid-call; the reaper settles them.
    claims_expired: int = 0
    #: Finished jobs whose terminal message is not on its stream yet (the outbox backlog).
    jobs_unpublished: int = 0

    @property
    def in_flight(self) -> int:
        return self.calls_by_status.get("claimed", 0)


def ledger_gauges(ledger: Ledger, now: datetime | None = None) -> LedgerGauges:
    # The ledger's clock, which stamped the leases and the finish times compared with it.
    gauges = call_gauges(ledger, now or ledger.now())
    return LedgerGauges(
        calls_by_status=gauges.calls_by_status,
        claims_expired=gauges.claims_expired,
        jobs_unpublished=gauges.jobs_unpublished,
    )


@dataclass(frozen=True)
class EscalationCounts:
    #: Open and held by no reviewer.
    waiting: int
    #: Claimed by a reviewer, not resolved yet.
    claimed: int
    #: Open, and met by a reader that found no reviewer can answer it (in neither above).
    unreadable: int = 0

    @property
    def open(self) -> int:
        """The escalations a reviewer can answer."""
        return self.waiting + self.claimed


def escalation_counts(
    client: redis.Redis,
    *,
    stream: str = keys.ESCALATION_STREAM,
    group: str = keys.ESCALATION_GROUP,
) -> EscalationCounts:
    """Open escalations: entries not yet handed to the group, plus those pending in it, less
    the entries a trim removed; those a reader found unreadable apart."""
    try:
        groups: Any = client.xinfo_groups(stream)
        head: Any = client.xinfo_stream(stream)
    except redis.ResponseError:
        return EscalationCounts(0, 0)  # no stream: nothing was ever escalated
    length = int(head["length"])
    first = _text(head["first-entry"][0]) if head.get("first-entry") else None
    info = next((g for g in groups if _text(g["name"]) == group), None)
    if info is None:
        # No reviewer has looked yet: every entry is waiting.
        return EscalationCounts(length, 0)
    lag = info.get("lag")
    if lag is None or head.get("entries-added") != length:
        # Redis cannot tell after deletions in the stream, and after a trim of entries the
        # group had not read it goes on counting them, for good: only while nothing ever
        # left the stream is its count sure.
        lag = _unread(client, stream, head, _text(info["last-delivered-id"]), first)
    summary: Any = client.xpending(stream, group)
    queued = sum(
        int(c["pending"])
        for c in summary.get("consumers") or []
        if _text(c["name"]) == QUEUE_CONSUMER
    )
    pending = int(summary.get("pending") or 0)
    gone_queued, gone_claimed = _trimmed_pending(client, stream, group, summary, first)
    bad_queued, bad_claimed = _unreadable(client, stream, group, first)
    # Clamped: the reads are not one snapshot (a reviewer may claim or resolve in between).
    return EscalationCounts(
        waiting=max(0, int(lag) + queued - gone_queued - bad_queued),
        claimed=max(0, pending - queued - gone_claimed - bad_claimed),
        unreadable=bad_queued + bad_claimed,
    )


def _unreadable(client: redis.Redis, stream: str, group: str, first: str | None) -> tuple[int, int]:
    """Entries a reader recorded as unreadable that are still pending and in the stream, as
    (held by the queue, held by reviewers); a trimmed one is counted by ``_trimmed_pending``."""
    if first is None:
        return 0, 0  # an empty stream: anything still pending was trimmed
    key = keys.escalation_unreadable(stream)
    recorded: Any = client.zrangebyscore(key, _order(first)[0], "+inf", start=0, num=MAX_UNREADABLE)
    ids = [_text(m) for m in recorded if _order(_text(m)) >= _order(first)]
    if not ids:
        return 0, 0
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xpending_range(stream, group, entry_id, entry_id, 1)
    queued = claimed = 0
    for rows in pipe.execute():
        for row in rows:  # none: acknowledged since it was recorded
            if _text(row["consumer"]) == QUEUE_CONSUMER:
                queued += 1
            else:
                claimed += 1
    return queued, claimed


def _unread(client: redis.Redis, stream: str, head: Any, last: str, first: str | None) -> int:
    """How many entries follow ``last`` (the last the group read) in the stream: ``head``."""
    if first is None or _order(last) >= _order(_text(head["last-generated-id"])):
        return 0
    if _order(last) < _order(first):
        return int(head["length"])  # a trim went past the last entry read: all left are unread
    return len(client.xrange(stream, min=f"({last}", max="+"))  # type: ignore[arg-type]


def _trimmed_pending(
    client: redis.Redis, stream: str, group: str, summary: Any, first: str | None
) -> tuple[int, int]:
    """Pending entries a trim removed, as (held by the queue, held by reviewers): those whose
    id comes before the stream's first entry (``first``; None: the stream is empty)."""
    oldest = summary.get("min")
    if not summary.get("pending") or oldest is None:
        return 0, 0
    if first is not None and _order(_text(oldest)) >= _order(first):
        return 0, 0  # the usual case: nothing pending was trimmed, nothing more to read
    queued = claimed = 0
    low, high = "-", "+" if first is None else f"({first}"
    while True:
        rows: Any = client.xpending_range(stream, group, low, high, _PAGE)
        for row in rows:
            if _text(row["consumer"]) == QUEUE_CONSUMER:
                queued += 1
            else:
                claimed += 1
        if len(rows) < _PAGE:
            return queued, claimed
        low = "(" + _text(rows[-1]["message_id"])  # exclusive: after the last one read


#: XPENDING rows read a call while counting trimmed entries (each an id, a name, two ints).
_PAGE = 10_000


def _order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``ms-seq``) as what orders it: its text does not (``9-0``, ``10-0``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True)
class QueueDepth:
    queue: str
    #: Messages waiting in the queue (not yet delivered to a worker).
    ready: int
    #: Redis only: messages delivered to some worker and not acknowledged yet, fleet-wide.
    unacked: int | None = None
    #: RabbitMQ only: consumers attached to the queue.
    consumers: int | None = None


def queue_depth(celery_app: Celery, queue: str = keys.CELERY_QUEUE) -> QueueDepth:
    """The Celery queue's depth through the broker's own client (Redis lists or AMQP)."""
    with celery_app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1)
        channel = conn.channel()
        try:
            try:
                _name, ready, consumers = channel.queue_declare(queue=queue, passive=True)
            except conn.channel_errors:
                # Redis deletes an empty list; RabbitMQ has no queue until a worker declares it.
                ready, consumers = 0, None
                channel = _reopened(conn, channel)
            if conn.transport.driver_type == "redis":
                unacked = int(channel.client.hlen(channel.unacked_key))
                return QueueDepth(queue, int(ready), unacked=unacked)
            return QueueDepth(
                queue, int(ready), consumers=None if consumers is None else int(consumers)
            )
        finally:
            channel.close()


def _reopened(conn: Any, channel: Any) -> Any:
    # AMQP closes a channel on NOT_FOUND; a virtual transport's channel stays usable.
    if getattr(channel, "is_open", True):
        return channel
    channel.close()
    return conn.channel()


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    concurrency: int | None
    processes: int
    tasks_done: int
    uptime_s: int | None


def workers(celery_app: Celery, *, timeout_s: float = 1.0) -> list[WorkerInfo]:
    """Every worker answering ``celery inspect stats`` within ``timeout_s``."""
    replies: Any = celery_app.control.inspect(timeout=timeout_s).stats() or {}
    found = []
    for name, stats in sorted(replies.items()):
        pool = stats.get("pool") or {}
        found.append(
            WorkerInfo(
                name=name,
                concurrency=pool.get("max-concurrency"),
                processes=len(pool.get("processes") or []),
                tasks_done=sum(int(n) for n in (stats.get("total") or {}).values()),
                uptime_s=stats.get("uptime"),
            )
        )
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
