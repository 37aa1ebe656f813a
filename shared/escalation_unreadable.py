"""The escalation entries a reader found no reviewer can answer, recorded by id.

``decode_entry`` (``shared.escalation_entries``) skips an entry that does not parse or that no
reviewer could answer; the claim skips it, and the console and ``decisions escalations list``
report it as unreadable. The ``decisions_escalations_open`` gauge cannot afford to read every
body on each scrape (20,000 open entries, some of them megabytes), and without a record it
counted such an entry as waiting for good. So the readers that meet one record its id
(``note_unreadable``: a sorted set beside the stream, ``keys.escalation_unreadable``, scored
by the id's milliseconds) and the gauge counts the recorded ones still open as
``unreadable``. An entry is recorded once a reader met it (a claim, a list and the console's
pages read from the oldest), and forgotten when it is acknowledged because its body is gone
(``forget_unreadable``) or when a reader reads it after all (a reader of an older version,
which could not parse a field a newer one adds, recorded it: while a fleet is being
upgraded the two may record and forget it in turn, and once it is upgraded the record is
right). The gauge passes over recorded ids no longer pending (acknowledged
by hand) or trimmed, so a stale id never counts; they are dropped when the record is full.
The record keeps at most ``MAX_UNREADABLE`` ids, the oldest: past them the gauge counts the
rest as waiting, as it counted all of them before.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import redis

from shared import keys

__all__ = ["MAX_UNREADABLE", "forget_unreadable", "note_unreadable"]

#: Unreadable entries of one stream recorded at most: the gauge reads each on every scrape.
MAX_UNREADABLE = 10_000


def note_unreadable(
    client: redis.Redis,
    stream: str,
    group: str,
    entry_ids: Collection[str],
    *,
    readable: Collection[str] = (),
) -> None:
    """Record that no reviewer can answer the entries ``entry_ids`` of ``stream`` (read
    through ``group``), and that one can answer those of ``readable``: one round trip,
    unless the record is full."""
    if not entry_ids and not readable:
        return
    key = keys.escalation_unreadable(stream)
    pipe = client.pipeline(transaction=False)
    if readable:
        pipe.zrem(key, *readable)
    if not entry_ids:
        pipe.execute()
        return
    pipe.zadd(key, {entry_id: _millis(entry_id) for entry_id in entry_ids})
    pipe.zcard(key)
    count = int(pipe.execute()[-1])
    if count <= MAX_UNREADABLE:
        return
    # Full: first drop the ids no longer open (acknowledged by hand, or after a trim) ...
    members: Any = client.zrange(key, 0, -1)
    recorded = [_text(m) for m in members]
    pipe = client.pipeline(transaction=False)
    for entry_id in recorded:
        pipe.xpending_range(stream, group, entry_id, entry_id, 1)
    answers = pipe.execute(raise_on_error=False)
    closed = [e for e, found in zip(recorded, answers, strict=True) if found == []]
    forget_unreadable(client, stream, closed)
    # ... then keep the oldest: every claim meets them first, so they are recorded for sure.
    client.zremrangebyrank(key, MAX_UNREADABLE, -1)


def forget_unreadable(client: redis.Redis, stream: str, entry_ids: Collection[str]) -> None:
    """Drop ``entry_ids`` from ``stream``'s record of unreadable entries (they were acked)."""
    if entry_ids:
        client.zrem(keys.escalation_unreadable(stream), *entry_ids)


def _millis(entry_id: str) -> int:
    """An entry id's milliseconds (``ms-seq``): what orders the record, trimmed first."""
    return int(entry_id.partition("-")[0])


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
