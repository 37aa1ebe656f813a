"""Recovering jobs the Redis broker lost, without any producer's help (``shared.intake``).

A message popped by a worker killed before kombu recorded it unacknowledged is gone from the
broker, and the ledger never saw its jobs. Every job's intake was recorded by its producer
before the message was published; a worker forgets the records of the jobs it ran
(``forget_ran``). The reaper (``worker.recovery.reaper``) calls ``recover_intake`` every round:

1. take up to ``BATCH`` records older than ``DECISIONS_INTAKE_GRACE_S`` (Redis time; taking
   re-times them, so that two reapers do not both act on one, and one not acted on now is
   looked at again a grace later). A record that cannot be read is dropped and logged
   (``intake.unreadable``): its job cannot be republished, and it must not hold back the
   others;
2. a job the ledger finished on that stream is not lost: its record is dropped (the outbox
   relay publishes its message if need be). One opened and not finished still needs a
   delivery (its worker may have died after opening it, its message stuck, below): it goes
   on like a job never seen, and a republished one settles from the ledger, sending nothing
   twice;
3. a job whose message the broker still holds (queued, or delivered and unacknowledged for
   less than twice the visibility timeout: kombu redelivers those itself; found by its
   Celery task id) is left to it. The broker is read at most ``SCAN_LIMIT`` messages deep:
   behind a longer backlog every record is left for a later round;
4. the rest are republished, a chunk a message, their records first pointed at the new
   message. Safe: the ledger never sends a call twice and publishes one terminal message per
   job. A job re-sent ``MAX_ATTEMPTS`` times and still never seen is given up, loudly.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
import structlog
from celery import Celery

from shared import keys
from shared.chunk_publisher import EncodedJobs, SplicingProducer
from shared.intake import IntakeBook, IntakeRecord, intake_member, records_intake
from shared.job_wire import json_text
from shared.message_size import MessageChunks, job_cost
from shared.redis_connect import redis_client
from shared.settings import Settings
from worker.ledger import Ledger

__all__ = [
    "BATCH",
    "MAX_ATTEMPTS",
    "SCAN_LIMIT",
    "IntakeRound",
    "Recovery",
    "forget_ran",
    "held_message_ids",
    "recover_intake",
    "send_jobs",
]

log = structlog.get_logger("decisions.intake")

#: Records looked at per reaper round (the round's work is bounded whatever the backlog).
BATCH = 500
#: Broker messages read at most to find which are still held; a deeper backlog waits.
SCAN_LIMIT = 5000
#: Re-sends of a job no worker ever takes (a message every worker rejects) before giving up.
MAX_ATTEMPTS = 5
#: kombu's Redis transport: where delivered, unacknowledged messages wait, and since when
#: (its default key names).
UNACKED_HASH = "unacked"
UNACKED_INDEX = "unacked_index"
#: Characters of an unreadable record's member logged (any key may be there, of any size).
MEMBER_SHOWN = 200

#: Publish these jobs as one message with this task id.
Publish = Callable[[list[dict[str, Any]], str], None]


@dataclass
class IntakeRound:
    """What one recovery round did."""

    taken: int = 0
    #: Finished in the ledger: the record is dropped.
    finished: int = 0
    held: int = 0
    republished: int = 0
    abandoned: int = 0
    #: Records that could not be read: dropped (not counted in ``taken``).
    unreadable: int = 0
    #: Set when the broker's backlog was too deep to read: nothing was republished.
    backlog: int | None = None


def _task_id(stored: bytes | str) -> str | None:
    try:
        envelope = json.loads(stored)
    except ValueError:
        return None
    if isinstance(envelope, list) and envelope:  # unacked: [message, exchange, routing key]
        envelope = envelope[0]
    if not isinstance(envelope, dict):
        return None
    # Anything may have been pushed onto the queue (by hand, by another program): only an
    # object is read for headers or properties; anything else holds no task id.
    headers, properties = envelope.get("headers"), envelope.get("properties")
    found = headers.get("id") if isinstance(headers, dict) else None
    if not found and isinstance(properties, dict):
        found = properties.get("correlation_id")
    return found if isinstance(found, str) else None


def held_message_ids(
    broker: redis.Redis, *, stale_after_s: float, limit: int = SCAN_LIMIT
) -> set[str] | int:
    """Task ids of the messages the broker holds, or, when there are more than ``limit``,
    how many there are (too many to read in one round).

    Held means queued, or delivered and unacknowledged for less than ``stale_after_s``
    (Redis time). kombu puts an unacknowledged message back on the queue a visibility timeout
    after its delivery, under a mutex that a worker killed while sweeping keeps for its whole
    expiry (5 min by default): one that stayed unacknowledged far longer is stuck, not held."""
    seconds, micros = broker.time()
    fresh_since = seconds + micros / 1e6 - stale_after_s
    pipe = broker.pipeline(transaction=False)
    pipe.llen(keys.CELERY_QUEUE)
    pipe.zrangebyscore(UNACKED_INDEX, fresh_since, "+inf")
    queued, fresh = pipe.execute()
    if int(queued) + len(fresh) > limit:
        return int(queued) + len(fresh)
    stored = list(broker.lrange(keys.CELERY_QUEUE, 0, limit))
    if fresh:
        stored += [raw for raw in broker.hmget(UNACKED_HASH, fresh) if raw is not None]
    return {task_id for raw in stored if (task_id := _task_id(raw)) is not None}


def _unreadable(done: IntakeRound, member: str, reason: str) -> None:
    """``IntakeBook.take`` dropped a record it could not read (never logs its job's body)."""
    done.unreadable += 1
    log.error(
        "intake.unreadable",
        member=member[:MEMBER_SHOWN],
        reason=reason,
        hint="dropped: not a record a producer wrote; if its job was lost, submit it again",
    )


def _finished(ledger: Ledger, record: IntakeRecord) -> bool:
    row = ledger.get_job(record.job_id)
    return row is not None and row.reply_to == record.reply_to and row.terminal_type is not None


async def recover_intake(
    ledger: Ledger,
    book: IntakeBook,
    broker: redis.Redis,
    publish: Publish,
    *,
    older_than_s: float,
    chunk_size: int,
    max_message_bytes: int | None = None,
    stale_after_s: float | None = None,
    batch: int = BATCH,
) -> IntakeRound:
    """One round of recovery (module doc); every step's blocking I/O off the loop."""
    done = IntakeRound()
    records = await asyncio.to_thread(
        book.take, older_than_s, batch, functools.partial(_unreadable, done)
    )
    done.taken = len(records)
    if not records:
        return done
    unseen: list[IntakeRecord] = []  # not finished in the ledger (most: never seen there)
    finished: list[str] = []
    for record in records:
        if await asyncio.to_thread(_finished, ledger, record):
            finished.append(record.member)
        else:
            unseen.append(record)
    await asyncio.to_thread(book.forget, finished)
    done.finished = len(finished)
    if not unseen:
        return done
    # Twice the visibility timeout: kombu's own redelivery of it is overdue by a whole one.
    stale = 2 * older_than_s if stale_after_s is None else stale_after_s
    held = await asyncio.to_thread(held_message_ids, broker, stale_after_s=stale)
    if isinstance(held, int):
        done.backlog = held
        log.info("intake.backlog", waiting=len(unseen), broker_messages=held)
        return done
    lost = [r for r in unseen if r.message_id not in held]
    done.held = len(unseen) - len(lost)
    given_up = [r for r in lost if r.attempts >= MAX_ATTEMPTS]
    for record in given_up:
        log.error(
            "intake.abandoned",
            job_id=record.job_id,
            reply_to=record.reply_to,
            attempts=record.attempts,
            hint="republished this often and never taken by a worker; see the worker logs",
        )
    await asyncio.to_thread(book.forget, [r.member for r in given_up])
    done.abandoned = len(given_up)
    again = [r for r in lost if r.attempts < MAX_ATTEMPTS]
    for chunk in _messages(again, chunk_size, max_message_bytes):
        message_id = str(uuid.uuid4())
        for record in chunk:  # the record names the new message before it exists
            await asyncio.to_thread(book.rewrite, record, message_id)
        await asyncio.to_thread(publish, [r.job for r in chunk], message_id)
        done.republished += len(chunk)
        log.warning(
            "intake.republished",
            job_ids=[r.job_id for r in chunk],
            message_id=message_id,
            attempts=chunk[0].attempts + 1,
        )
    return done


def _messages(
    records: list[IntakeRecord], chunk_size: int, max_bytes: int | None
) -> Iterator[list[IntakeRecord]]:
    """The records to republish, a message each group: at most ``chunk_size`` jobs, and
    under the message cap as the client's chunks are (``shared.message_size``), so that no
    worker drops a republished message as oversize (its jobs would be lost for good)."""
    chunks: MessageChunks[IntakeRecord] = MessageChunks(
        max(1, chunk_size), max_bytes if max_bytes is not None else sys.maxsize
    )
    for record in records:
        # The job's text as ``send_jobs`` writes it in the body (compact UTF-8, as the
        # client's): what fitted the client's message fits the reaper's.
        yield from chunks.add(None, record, job_cost(_job_text(record.job)))
    yield from chunks.drain()


def _job_text(job: dict[str, Any]) -> str:
    """A record's job as the reaper sends and costs it: compact UTF-8, or, for one that is
    no strict JSON (a hand edit: a NaN), json's own text, which the worker's guard rejects
    naming the field rather than the reaper failing its round on it."""
    try:
        return json_text(job)
    except (ValueError, TypeError, RecursionError):
        return json.dumps(job)


def send_jobs(celery_app: Celery) -> Publish:
    """How the reaper publishes: one Celery message of these jobs with this task id, the
    body written as the client writes it (``shared.chunk_publisher.SplicingProducer``), so
    that a job is the same bytes on the queue, and under the same cap, however it got there.
    """

    def publish(jobs: list[dict[str, Any]], message_id: str) -> None:
        with celery_app.producer_or_acquire() as producer:
            celery_app.send_task(
                keys.RUN_JOBS_TASK,
                kwargs={"jobs": EncodedJobs(_job_text(job) for job in jobs)},
                queue=keys.CELERY_QUEUE,
                task_id=message_id,
                producer=SplicingProducer(producer),
                argsrepr="()",
                kwargsrepr=f"{{'jobs': <{len(jobs)} jobs>}}",
            )

    return publish


class Recovery:
    """The reaper's view of intake: the records' Redis, the broker's, and how to publish."""

    def __init__(
        self, settings: Settings, book: IntakeBook, broker: redis.Redis, publish: Publish
    ) -> None:
        self.settings = settings
        self.book = book
        self.broker = broker
        self.publish = publish

    @classmethod
    def from_settings(cls, settings: Settings) -> Recovery | None:
        """None unless the broker is Redis (the only one that loses messages this way)."""
        if not records_intake(settings.broker_url):
            return None
        from worker.app import app as celery_app

        publish = send_jobs(celery_app)
        book = IntakeBook(redis_client(settings.redis_url))
        return cls(settings, book, redis_client(settings.broker_url), publish)

    async def run_once(self, ledger: Ledger) -> IntakeRound:
        return await recover_intake(
            ledger,
            self.book,
            self.broker,
            self.publish,
            # A lost pop is known for lost as soon as the broker holds the message nowhere
            # (queued or unacknowledged): a short grace, not a visibility timeout, lets a
            # recovered job still meet its deadline; one still in flight is left to kombu.
            older_than_s=min(self.settings.intake_grace_s, self.settings.visibility_timeout_s),
            stale_after_s=2 * self.settings.visibility_timeout_s,
            chunk_size=self.settings.chunk_size,
            max_message_bytes=self.settings.max_message_bytes,
        )


def _recorded_member(job: Any) -> str | None:
    """The intake member a producer recorded for this raw job, or None for a job no producer
    records: an id or ``reply_to`` of another type, or text Redis cannot take (a lone
    surrogate). Such a job is rejected by its run, and its member must not raise here: a
    ``reply_to`` of 5 raised out of the acknowledgement thread, which ended, and the worker
    acknowledged nothing more (found by an attack)."""
    if not isinstance(job, dict):
        return None
    job_id, reply_to = job.get("id"), job.get("reply_to")
    if not isinstance(job_id, str) or not (reply_to is None or isinstance(reply_to, str)):
        return None
    member = intake_member(reply_to, job_id)
    try:
        member.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return member


def forget_ran(book: IntakeBook | None, jobs: Iterable[Any]) -> None:
    """A worker ran these jobs (each has its row, or its rejection): drop their records.

    Best effort: a record left behind is dropped by the reaper once it finds the job's row."""
    if book is None:
        return
    members = [member for member in map(_recorded_member, jobs) if member is not None]
    try:
        book.forget(members)
    except redis.RedisError as exc:
        log.warning("intake.forget_failed", jobs=len(members), error=type(exc).__name__)
