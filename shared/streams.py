"""Reply and escalation streams on Redis: publish a terminal message once, read them back.

Publishing is one Lua call, atomic as Redis runs it. It first checks that every key it will
write is a stream (or absent), so that the writes that follow cannot fail half-way: the
reply entry is appended and its marker set (the marker's value is the entry's id) only if
the marker was not set; for an escalation, the escalation stream gets its entry once per
*job* (its own marker, whatever the reply stream), and never once the job is resolved. A
result chosen for an audit (``shared.labels``) puts its ``audit`` escalation on the
escalation stream the same way, once per job, while the result itself goes to the reply
stream: the result is not held back. Its first write is the XADD: a Redis that refuses it
(out of memory) has written nothing, and Redis lets the rest of a script finish once it has
written. A worker that crashed after
publishing and publishes again from the ledger's outbox adds nothing.

A publish that wrote nothing raises ``PublishFailed`` (with one error-level log line): its
caller must not mark the ledger published, so the reaper's outbox relay tries again.

``republish`` is the same call for a stream that lost its entries (a Redis restarted
without persistence, a stream deleted): a marker counts only if its entry is still there.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import redis

from shared import keys
from shared.errors import PublishFailed

if TYPE_CHECKING:
    from shared.rejection import Rejection

__all__ = [
    "ESCALATION_ADDED",
    "REPLY_ADDED",
    "Publication",
    "RedisPublisher",
    "ReplyPublisher",
    "StreamEntry",
    "follow_stream",
    "publish_many",
    "publish_once",
    "read_entries",
    "read_stream",
    "republish",
]

log = logging.getLogger(__name__)

#: Bits of the script's answer: what this call appended.
REPLY_ADDED: Final = 1
ESCALATION_ADDED: Final = 2

# KEYS: 1 reply marker, 2 reply stream, 3 escalation marker, 4 escalation stream,
#       5 the job's resolved record (3 to 5 for escalations only).
# ARGV: 1 message, 2 marker TTL (s), 3 job id, 4 type, 5 reply stream name,
#       6 '1' to republish: a marker whose entry is gone does not count,
#       7 the escalation stream's message when it differs (an audit of a result), else ''.
_PUBLISH_ONCE = """
local function refuse_non_stream(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a stream')
  end
  return nil
end
local function published(marker, stream)
  local id = redis.call('GET', marker)
  if not id then return false end
  if ARGV[6] ~= '1' then return true end
  local found = redis.pcall('XRANGE', stream, id, id)
  return type(found) == 'table' and found.err == nil and #found > 0
end
local refused = refuse_non_stream(KEYS[2])
if not refused and #KEYS >= 4 then refused = refuse_non_stream(KEYS[4]) end
if refused then return refused end
local added = 0
if not published(KEYS[1], KEYS[2]) then
  local id = redis.call('XADD', KEYS[2], '*', 'job_id', ARGV[3], 'type', ARGV[4],
                        'message', ARGV[1])
  redis.call('SET', KEYS[1], id, 'EX', ARGV[2])
  added = added + 1
end
if #KEYS >= 4 and redis.call('EXISTS', KEYS[5]) == 0 and not published(KEYS[3], KEYS[4]) then
  local body, kind = ARGV[1], ARGV[4]
  if ARGV[7] ~= '' then body, kind = ARGV[7], 'escalation' end
  local id = redis.call('XADD', KEYS[4], '*', 'job_id', ARGV[3], 'type', kind,
                        'reply_to', ARGV[5], 'message', body)
  redis.call('SET', KEYS[3], id, 'EX', ARGV[2])
  added = added + 2
end
return added
"""
#: The script's SHA1, as Redis names it (``EVALSHA``).
_PUBLISH_ONCE_SHA: Final = hashlib.sha1(_PUBLISH_ONCE.encode()).hexdigest()


@dataclass(frozen=True)
class StreamEntry:
    entry_id: str
    job_id: str
    type: str
    message: str
    fields: dict[str, str]


@dataclass(frozen=True)
class Publication:
    """One terminal message to append once: a ``publish_once`` call's arguments.

    ``stream`` is a reply stream's *name* (a job's ``reply_to``), never a key."""

    stream: str
    job_id: str
    message_type: str
    message_json: str
    escalation: bool = False
    marker: str | None = None
    #: An audit escalation of this result, for the escalation stream (``shared.labels``).
    audit_json: str | None = None

    @classmethod
    def rejected(cls, rejection: Rejection) -> Publication:
        """A rejected job's message, once under its own marker: the producer's and the
        worker's rejections alike."""
        return cls(
            stream=rejection.stream,
            job_id=rejection.job_id,
            message_type="rejected",
            message_json=rejection.message.to_json(),
            marker=rejection.marker,
        )


def _script_call(
    publication: Publication, *, ttl_s: int, escalation_stream: str, again: bool = False
) -> tuple[list[str], list[Any]]:
    stream_keys = [
        keys.published_marker(publication.stream, publication.job_id, marker=publication.marker),
        keys.reply_stream(publication.stream),
    ]
    if publication.escalation or publication.audit_json:
        stream_keys += [
            keys.escalation_marker(publication.job_id),
            escalation_stream,
            keys.resolved_record(publication.job_id),
        ]
    args = [
        publication.message_json,
        ttl_s,
        publication.job_id,
        publication.message_type,
        publication.stream,
        "1" if again else "0",
        publication.audit_json or "",
    ]
    return stream_keys, args


def _failed(publication: Publication, error: Exception) -> PublishFailed:
    """The error a publish that wrote nothing raises, logged once as it is made."""
    failure = PublishFailed(
        f"publishing job {publication.job_id}'s {publication.message_type} to reply stream "
        f"{publication.stream!r} wrote nothing: {error}; it stays in the ledger's outbox and "
        "the reaper publishes it again once the key is a stream (or deleted)"
    )
    log.error("%s", failure)
    return failure


def publish_once(
    client: redis.Redis,
    *,
    stream: str,
    job_id: str,
    message_type: str,
    message_json: str,
    escalation: bool = False,
    marker: str | None = None,
    ttl_s: int = 7 * 24 * 3600,
    escalation_stream: str = keys.ESCALATION_STREAM,
    audit_json: str | None = None,
) -> bool:
    """Append the message unless it was published before; True if this call appended it to
    the reply stream. ``PublishFailed`` if Redis refused it (nothing was written); a
    connection error is raised as it is (none or all was written; publishing again is safe).
    """
    publication = Publication(
        stream, job_id, message_type, message_json, escalation, marker, audit_json
    )
    stream_keys, args = _script_call(publication, ttl_s=ttl_s, escalation_stream=escalation_stream)
    try:
        added = client.register_script(_PUBLISH_ONCE)(keys=stream_keys, args=args)
    except redis.ResponseError as error:
        raise _failed(publication, error) from None
    return bool(int(added) & REPLY_ADDED)


def publish_many(
    client: redis.Redis,
    publications: list[Publication],
    *,
    ttl_s: int = 7 * 24 * 3600,
    escalation_stream: str = keys.ESCALATION_STREAM,
) -> list[bool | Exception]:
    """``publish_once`` for each, in one round trip (a pipeline, not a transaction: each
    call is atomic on its own, as it is alone). Per publication: appended now, or its error
    (``PublishFailed`` when Redis refused it).

    A connection error raises for all of them: none, some or all may have been appended,
    and publishing again is safe, since each one's marker keeps a second copy out."""
    answers = _run_many(client, publications, ttl_s, escalation_stream, again=False)
    return [a if isinstance(a, Exception) else bool(a & REPLY_ADDED) for a in answers]


def republish(
    client: redis.Redis,
    publications: list[Publication],
    *,
    ttl_s: int = 7 * 24 * 3600,
    escalation_stream: str = keys.ESCALATION_STREAM,
) -> list[int | Exception]:
    """Publish again what a stream lost: as ``publish_many``, but a marker whose entry is no
    longer in its stream does not count. Per publication: the ``REPLY_ADDED`` /
    ``ESCALATION_ADDED`` bits of what was appended, or its error. Running it twice appends
    nothing the second time."""
    return _run_many(client, publications, ttl_s, escalation_stream, again=True)


def _run_many(
    client: redis.Redis,
    publications: list[Publication],
    ttl_s: int,
    escalation_stream: str,
    *,
    again: bool,
) -> list[int | Exception]:
    if not publications:
        return []
    calls = [
        _script_call(p, ttl_s=ttl_s, escalation_stream=escalation_stream, again=again)
        for p in publications
    ]
    answers = _evalsha_many(client, calls)
    unknown = [i for i, a in enumerate(answers) if isinstance(a, redis.exceptions.NoScriptError)]
    if unknown:
        # A Redis that never saw the script (or flushed it): those calls ran nothing, so
        # they run again once it is loaded; the others stand as they are.
        client.script_load(_PUBLISH_ONCE)
        rerun = _evalsha_many(client, [calls[i] for i in unknown])
        for i, answer in zip(unknown, rerun, strict=True):
            answers[i] = answer
    out: list[int | Exception] = []
    for publication, answer in zip(publications, answers, strict=True):
        if isinstance(answer, Exception):
            out.append(_failed(publication, answer))
        else:
            out.append(int(answer))
    return out


def _evalsha_many(client: redis.Redis, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
    """The script by its SHA for each call, one round trip. Not redis-py's ``Script`` on a
    pipeline: that asks ``SCRIPT EXISTS`` first, a second round trip every batch."""
    with client.pipeline(transaction=False) as pipe:
        for stream_keys, args in calls:
            pipe.evalsha(_PUBLISH_ONCE_SHA, len(stream_keys), *stream_keys, *args)
        return list(pipe.execute(raise_on_error=False))


class ReplyPublisher(Protocol):
    """Where terminal messages go: Redis streams in a fleet, memory in the embedded run."""

    def publish(self, item: Publication) -> bool:
        """Append once (per stream and marker, default the job id); True if appended now,
        False if it was published before; raises (``PublishFailed``) if nothing was written."""
        ...


class RedisPublisher:
    def __init__(
        self, client: redis.Redis, *, ttl_s: int, escalation_stream: str = keys.ESCALATION_STREAM
    ) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.escalation_stream = escalation_stream

    def publish(self, item: Publication) -> bool:
        return publish_once(
            self.client,
            stream=item.stream,
            job_id=item.job_id,
            message_type=item.message_type,
            message_json=item.message_json,
            escalation=item.escalation,
            marker=item.marker,
            ttl_s=self.ttl_s,
            escalation_stream=self.escalation_stream,
            audit_json=item.audit_json,
        )

    def publish_many(self, publications: list[Publication]) -> list[bool | Exception]:
        """Several publications in one round trip (``publish_many``)."""
        return publish_many(
            self.client,
            publications,
            ttl_s=self.ttl_s,
            escalation_stream=self.escalation_stream,
        )


def _entry(entry_id: Any, fields: dict[Any, Any]) -> StreamEntry:
    decoded = {_text(k): _text(v) for k, v in fields.items()}
    return StreamEntry(
        entry_id=_text(entry_id),
        job_id=decoded.get("job_id", ""),
        type=decoded.get("type", ""),
        message=decoded.get("message", ""),
        fields=decoded,
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def read_entries(
    client: redis.Redis, key: str, *, after: str = "-", count: int = 1000
) -> Iterator[StreamEntry]:
    """Every entry of the stream at ``key`` (the escalation stream, or a reply stream's
    ``keys.reply_stream(name)``) from ``after`` (exclusive when it is an id) to its end."""
    start = after if after == "-" else f"({after}"
    while True:
        batch: Any = client.xrange(key, min=start, max="+", count=count)
        if not batch:
            return
        for entry_id, fields in batch:
            yield _entry(entry_id, fields)
        start = f"({_text(batch[-1][0])}"


def read_stream(
    client: redis.Redis, stream: str, *, after: str = "-", count: int = 1000
) -> Iterator[StreamEntry]:
    """Every entry of the reply stream named ``stream`` (a ``reply_to``), from ``after``."""
    return read_entries(client, keys.reply_stream(stream), after=after, count=count)


def follow_stream(
    client: redis.Redis, stream: str, *, after: str = "0-0", block_ms: int = 1000
) -> Iterator[StreamEntry | None]:
    """The reply stream named ``stream``'s entries as they arrive; yields None after each
    idle ``block_ms`` so callers can stop."""
    key = keys.reply_stream(stream)
    last = after
    while True:
        answer: Any = client.xread({key: last}, count=500, block=block_ms)
        if not answer:
            yield None
            continue
        for _name, entries in answer:
            for entry_id, fields in entries:
                last = _text(entry_id)
                yield _entry(entry_id, fields)
