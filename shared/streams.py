"""Reply and escalation streams on Redis: publish a terminal message once, read them back.

Publishing is one Lua call: it sets the job's publish marker and appends to the reply stream
(and, for an escalation, to the escalation stream) only if the marker was not set, so a
worker that crashed after publishing and re-publishes from the ledger's outbox adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from shared import keys

__all__ = [
    "Publication",
    "RedisPublisher",
    "ReplyPublisher",
    "StreamEntry",
    "follow_stream",
    "publish_many",
    "publish_once",
    "read_stream",
]

_PUBLISH_ONCE = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then
  local id = redis.call('XADD', KEYS[2], '*', 'job_id', ARGV[3], 'type', ARGV[4],
                        'message', ARGV[1])
  if #KEYS >= 3 then
    redis.call('XADD', KEYS[3], '*', 'job_id', ARGV[3], 'type', ARGV[4], 'reply_to', KEYS[2],
               'message', ARGV[1])
  end
  return id
end
return false
"""


@dataclass(frozen=True)
class StreamEntry:
    entry_id: str
    job_id: str
    type: str
    message: str
    fields: dict[str, str]


@dataclass(frozen=True)
class Publication:
    """One terminal message to append once: a ``publish_once`` call's arguments."""

    stream: str
    job_id: str
    message_type: str
    message_json: str
    escalation: bool = False
    marker: str | None = None


def _script_call(
    publication: Publication, *, ttl_s: int, escalation_stream: str
) -> tuple[list[str], list[Any]]:
    marker_key = keys.published_marker(publication.stream, publication.marker or publication.job_id)
    stream_keys = [marker_key, keys.reply_stream(publication.stream)]
    if publication.escalation:
        stream_keys.append(escalation_stream)
    args = [publication.message_json, ttl_s, publication.job_id, publication.message_type]
    return stream_keys, args


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
) -> bool:
    """Append the message unless it was published before; True if this call appended it."""
    publication = Publication(stream, job_id, message_type, message_json, escalation, marker)
    stream_keys, args = _script_call(publication, ttl_s=ttl_s, escalation_stream=escalation_stream)
    added = client.register_script(_PUBLISH_ONCE)(keys=stream_keys, args=args)
    return bool(added)


def publish_many(
    client: redis.Redis,
    publications: list[Publication],
    *,
    ttl_s: int = 7 * 24 * 3600,
    escalation_stream: str = keys.ESCALATION_STREAM,
) -> list[bool | Exception]:
    """``publish_once`` for each, in one round trip (a pipeline, not a transaction: each
    call is atomic on its own, as it is alone). Per publication: appended now, or its error.

    A connection error raises for all of them: none, some or all may have been appended,
    and publishing again is safe, since each one's marker keeps a second copy out."""
    script = client.register_script(_PUBLISH_ONCE)
    with client.pipeline(transaction=False) as pipe:
        for publication in publications:
            stream_keys, args = _script_call(
                publication, ttl_s=ttl_s, escalation_stream=escalation_stream
            )
            script(keys=stream_keys, args=args, client=pipe)
        answers = pipe.execute(raise_on_error=False)
    return [a if isinstance(a, Exception) else bool(a) for a in answers]


class ReplyPublisher(Protocol):
    """Where terminal messages go: Redis streams in a fleet, memory in the embedded run."""

    def publish(
        self,
        *,
        stream: str,
        job_id: str,
        message_type: str,
        message_json: str,
        escalation: bool,
        marker: str | None = None,
    ) -> bool:
        """Append once (per stream and marker, default the job id); True if appended now."""
        ...


class RedisPublisher:
    def __init__(
        self, client: redis.Redis, *, ttl_s: int, escalation_stream: str = keys.ESCALATION_STREAM
    ) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.escalation_stream = escalation_stream

    def publish(
        self,
        *,
        stream: str,
        job_id: str,
        message_type: str,
        message_json: str,
        escalation: bool,
        marker: str | None = None,
    ) -> bool:
        return publish_once(
            self.client,
            stream=stream,
            job_id=job_id,
            message_type=message_type,
            message_json=message_json,
            escalation=escalation,
            marker=marker,
            ttl_s=self.ttl_s,
            escalation_stream=self.escalation_stream,
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
    return value.decode() if isinstance(value, bytes) else str(value)


def read_stream(
    client: redis.Redis, stream: str, *, after: str = "-", count: int = 1000
) -> Iterator[StreamEntry]:
    """Every entry of a stream from ``after`` (exclusive when it is an id) to its end."""
    start = after if after == "-" else f"({after}"
    while True:
        batch: Any = client.xrange(keys.reply_stream(stream), min=start, max="+", count=count)
        if not batch:
            return
        for entry_id, fields in batch:
            yield _entry(entry_id, fields)
        start = f"({_text(batch[-1][0])}"


def follow_stream(
    client: redis.Redis, stream: str, *, after: str = "0-0", block_ms: int = 1000
) -> Iterator[StreamEntry | None]:
    """Entries as they arrive; yields None after each idle ``block_ms`` so callers can stop."""
    last = after
    while True:
        answer: Any = client.xread({keys.reply_stream(stream): last}, count=500, block=block_ms)
        if not answer:
            yield None
            continue
        for _name, entries in answer:
            for entry_id, fields in entries:
                last = _text(entry_id)
                yield _entry(entry_id, fields)
