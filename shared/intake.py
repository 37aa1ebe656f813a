"""The intake record: every job a producer queued, kept in Redis until a worker has taken it.

kombu's Redis transport takes a message off the queue (``BRPOP``) and records it as
unacknowledged in a second round trip: a worker killed in between takes the message with it
(celery/celery#4354, celery/kombu#305). No acknowledgement setting closes that window, and the
ledger never saw the job, so nothing else knows it existed. Hence, with a Redis broker:

- the producer (``shared.client``) records each job's intake *before* publishing its message:
  the job's JSON as queued, the Celery task id of its message, and the submit time by Redis
  ``TIME`` (one clock for every producer and worker), in one Lua call per message;
- a worker forgets the records of a message's jobs once it ran them (``worker.recovery.intake``);
- a producer whose publish raised withdraws that message's records at once (``withdraw``):
  it tells its caller those jobs were not queued, and a reaper must not queue them later;
- the workers' reaper republishes, after the visibility timeout, the jobs whose record is
  older than that, that the ledger never saw and that the broker no longer holds (safe: the
  ledger sends nothing twice).

A record is keyed by (reply stream, job id), length-safe as a JSON pair, so the same id sent
to two streams is two records. Records live in the Redis of the reply streams
(``settings.redis_url``), which the worker requires to persist; with another broker
(RabbitMQ acknowledges per message) nothing is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring as _json_string
from json.encoder import encode_basestring_ascii as _json_ascii_string
from typing import Any

import redis

from shared import keys

__all__ = [
    "IntakeBook",
    "IntakeCounts",
    "IntakeRecord",
    "intake_member",
    "member_job_id",
    "records_intake",
]

#: Record every (member, record) pair of ARGV at the server's own time; returns that time.
_RECORD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
return tostring(now)
"""

#: Take up to ARGV[2] records older than ARGV[1] s (server time): each is re-timed to now, so
#: that another reaper does not take it too, and returned as member, record pairs after now.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]),
                       'LIMIT', 0, tonumber(ARGV[2]))
local out = {tostring(now)}
for _, member in ipairs(old) do
  local record = redis.call('HGET', KEYS[2], member)
  if record then
    redis.call('ZADD', KEYS[1], now, member)
    table.insert(out, member)
    table.insert(out, record)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return out
"""

#: Drop each member of ARGV[2..] whose record still begins with ARGV[1] (it names the message
#: whose publish failed): one a reaper already pointed at a new message is that message's now.
_WITHDRAW = """
local dropped = 0
for i = 2, #ARGV do
  local record = redis.call('HGET', KEYS[2], ARGV[i])
  if record and string.sub(record, 1, #ARGV[1]) == ARGV[1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
"""

_REDIS_SCHEMES = ("redis://", "rediss://", "redis+socket://", "sentinel://")


def records_intake(broker_url: str) -> bool:
    """Whether jobs published to this broker get intake records (a Redis broker)."""
    return broker_url.startswith(_REDIS_SCHEMES)


def intake_member(reply_to: str | None, job_id: str) -> str:
    """The record's key inside the intake hash and sorted set: (stream, id) as a JSON pair.

    Exactly ``json.dumps([reply_to, job_id], ensure_ascii=False, separators=(",", ":"))``,
    written out with the encoder's own string function: a producer takes one per job, and
    the list encoder's set-up was a third of it."""
    stream = "null" if reply_to is None else _json_string(reply_to)
    return f"[{stream},{_json_string(job_id)}]"


def member_job_id(member: str) -> str:
    """The job id of an ``intake_member``."""
    return str(json.loads(member)[1])


@dataclass(frozen=True)
class IntakeRecord:
    """One job as queued: its (stream, id), its message's task id, how often it was re-sent."""

    member: str
    reply_to: str | None
    job_id: str
    message_id: str
    attempts: int
    job: dict[str, Any]

    @staticmethod
    def text(message_id: str, job_json: str, attempts: int = 0) -> str:
        """The stored form; the job's JSON text goes in as it is (no second encoding)."""
        return f'{IntakeRecord.prefix(message_id)}"attempts":{attempts},"job":{job_json}}}'

    @staticmethod
    def prefix(message_id: str) -> str:
        """How the stored form of every record naming ``message_id`` begins."""
        # json.dumps(message_id) by the encoder's string function (once a job, on a producer)
        return f'{{"message":{_json_ascii_string(message_id)},'

    @classmethod
    def parse(cls, member: str, text: str) -> IntakeRecord:
        """The record stored as ``text`` under ``member``. ``ValueError`` if it cannot be read
        (a hand edit, another program's key): its text says what is wrong, never quoting the
        record, which holds the job's body."""
        pair = _json(member, "member")
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str | None)
            and isinstance(pair[1], str)
        ):
            raise ValueError("member is not a [stream, job id] pair")
        stored = _json(text, "record")
        if not isinstance(stored, dict):
            raise ValueError("record is not a JSON object")
        message_id, job = stored.get("message"), stored.get("job")
        attempts = stored.get("attempts", 0)
        if not isinstance(message_id, str):
            raise ValueError("record names no message")
        if not isinstance(attempts, int) or isinstance(attempts, bool):
            raise ValueError("record's attempts is not an integer")
        if not isinstance(job, dict):
            raise ValueError("record's job is not a JSON object")
        return cls(member, pair[0], pair[1], message_id, attempts, job)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError(f"{what} is not JSON") from None


def _text(value: bytes | str, what: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8") from None


@dataclass(frozen=True)
class IntakeCounts:
    """What ``decisions status`` shows: jobs queued that no worker has taken yet."""

    #: Every job recorded and not yet taken (queued, in flight, or lost by the broker).
    waiting: int
    #: Of those, submitted longer ago than the visibility timeout: the broker may have lost
    #: them; a worker's reaper republishes them unless the broker still holds them.
    overdue: int
    #: Age of the oldest record, in seconds (None: none).
    oldest_s: float | None


class IntakeBook:
    """The intake records in one Redis (the reply streams')."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._record = client.register_script(_RECORD)
        self._take = client.register_script(_TAKE)
        self._withdraw = client.register_script(_WITHDRAW)

    def record(self, entries: Sequence[tuple[str, str]], message_id: str) -> None:
        """Record (member, job JSON) pairs of one message, before it is published."""
        if not entries:
            return
        argv: list[str] = []
        for member, job_json in entries:
            argv += [member, IntakeRecord.text(message_id, job_json)]
        self._record(keys=[keys.INTAKE_TIMES, keys.INTAKE_JOBS], args=argv)

    def withdraw(self, members: Iterable[str], message_id: str) -> int:
        """Drop the records of ``members`` that still name ``message_id``, a message whose
        publish failed; returns how many were dropped. A record a reaper has since pointed
        at a message of its own is left: that message holds the job now."""
        listed = list(members)
        if not listed:
            return 0
        prefix = IntakeRecord.prefix(message_id)
        dropped = self._withdraw(keys=[keys.INTAKE_TIMES, keys.INTAKE_JOBS], args=[prefix, *listed])
        return int(dropped)

    def rewrite(self, record: IntakeRecord, message_id: str) -> None:
        """Point a record at the message that re-sends it (its time was set when taken)."""
        # As read (a hand-edited NaN too: the worker rejects it, naming the field).
        job = json.dumps(record.job, ensure_ascii=False, separators=(",", ":"))
        text = IntakeRecord.text(message_id, job, record.attempts + 1)
        self.redis.hset(keys.INTAKE_JOBS, record.member, text)

    def held(self, members: Iterable[str]) -> set[str]:
        """Those of ``members`` with a record: queued, or taken by a worker not done yet."""
        listed = list(members)
        if not listed:
            return set()
        found = self.redis.hmget(keys.INTAKE_JOBS, listed)
        return {member for member, text in zip(listed, found, strict=True) if text is not None}

    def forget(self, members: Iterable[str | bytes]) -> None:
        """Drop records: their jobs were taken by a worker (or given up)."""
        listed = list(members)
        if not listed:
            return
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(keys.INTAKE_TIMES, *listed)
        pipe.hdel(keys.INTAKE_JOBS, *listed)
        pipe.execute()

    def take(
        self,
        older_than_s: float,
        limit: int,
        unreadable: Callable[[str, str], None] | None = None,
    ) -> list[IntakeRecord]:
        """Up to ``limit`` records older than ``older_than_s`` (Redis time), re-timed to now.

        A record that cannot be read is dropped, not returned: no reaper can republish its
        job, and raising would hold back every other record of the batch, round after round.
        ``unreadable`` is told its member and what is wrong (``IntakeRecord.parse``)."""
        answer = self._take(keys=[keys.INTAKE_TIMES, keys.INTAKE_JOBS], args=[older_than_s, limit])
        taken = answer[1:]
        records: list[IntakeRecord] = []
        dropped: list[str | bytes] = []
        for member, text in zip(taken[::2], taken[1::2], strict=True):
            try:
                records.append(IntakeRecord.parse(_text(member, "member"), _text(text, "record")))
            except ValueError as exc:
                dropped.append(member)  # as stored: a member not UTF-8 is deleted too
                if unreadable is not None:
                    shown = member.decode(errors="replace") if isinstance(member, bytes) else member
                    unreadable(shown, str(exc))
        self.forget(dropped)
        return records

    def counts(self, overdue_after_s: float) -> IntakeCounts:
        seconds, micros = self.redis.time()
        now = seconds + micros / 1e6
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(keys.INTAKE_TIMES)
        pipe.zcount(keys.INTAKE_TIMES, "-inf", now - overdue_after_s)
        pipe.zrange(keys.INTAKE_TIMES, 0, 0, withscores=True)
        waiting, overdue, oldest = pipe.execute()
        oldest_s = max(0.0, now - float(oldest[0][1])) if oldest else None
        return IntakeCounts(int(waiting), int(overdue), oldest_s)
