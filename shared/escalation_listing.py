"""Reading the open escalations a page at a time, entry by entry, reporting those that do not
parse: what the console's pages and ``decisions escalations list`` show.

The pages read through the queue's own Redis stream and group, as ``EscalationQueue``
does, each entry on its own: one that ``decode_entry`` skips (it does not parse, a field a
newer version adds, a damaged message; it is no escalation; its ``reply_to`` is not a stream
name; its questions cannot be read, so no answer could be checked against them and the
console could build no form of them: the queue skips it too, it can never be claimed) is
listed as unreadable, by id and with why, instead
of failing the page for every reviewer, and the detail page reads its one entry instead of
parsing every open one (a 10,000-item sift escalation is megabytes of JSON). Claims,
releases and resolutions still go through ``EscalationQueue``.

A list is a page (``list_open``): at most ``PAGE_ROWS`` rows, from at most ``SCAN_LIMIT``
entries or ``MAX_READ_BYTES`` of them read, after a given entry, with where the next page
starts. Found by an attack: every view read every open entry's body, 20,000 of them took 4
to 8 s and 9.5 MB of HTML, and four views at once 24 s each and 1.9 GB, a read-only login
being enough. ``decisions escalations list`` read every open entry the same way on each
call; it pages with these too (``--after``).

Here, beside ``EscalationQueue`` (``shared.escalations``), rather than in the console: the
console and the CLI both list, and what is listed must be the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.escalation_entries import decode_entry
from shared.escalation_unreadable import note_unreadable
from shared.escalations import QUEUE_CONSUMER, EscalationQueue, OpenEscalation
from shared.replies import EscalationMessage

__all__ = ["MAX_READ_BYTES", "PAGE_ROWS", "SCAN_LIMIT", "Listing", "find_open", "list_open"]

_MAX_SHOWN_UNREADABLE = 50
#: Rows on a page of the list.
PAGE_ROWS = 100
#: Open entries one page reads at most (a filter matching few of many is paged too).
SCAN_LIMIT = 2_000
#: Bytes of entries one page reads at most (a sift escalation may be megabytes).
MAX_READ_BYTES = 32 * 2**20
#: Entries read in one round trip.
_CHUNK = 50


@dataclass(frozen=True)
class Listing:
    items: list[OpenEscalation]
    #: Ids of open entries that could not be read (at most 50 of them), of those read.
    unreadable: list[str] = field(default_factory=list)
    unreadable_count: int = 0
    #: Why each entry of ``unreadable`` cannot be read, by id.
    unreadable_why: dict[str, str] = field(default_factory=dict)
    #: The last entry this page read, when more are open after it; None at the end.
    next_after: str | None = None
    #: Open entries in all, whatever the filter (the group's pending count).
    open_total: int = 0


def list_open(
    queue: EscalationQueue,
    *,
    reason: str | None = None,
    batch: str | None = None,
    after: str | None = None,
    limit: int = PAGE_ROWS,
) -> Listing:
    """A page of the open escalations, oldest first, after the entry ``after`` (optionally
    of one reason or batch): up to ``limit`` of them, from what ``SCAN_LIMIT`` and
    ``MAX_READ_BYTES`` let one page read."""
    queue.sync()
    summary: Any = queue.redis.xpending(queue.stream, queue.group)
    items: list[OpenEscalation] = []
    unreadable: list[tuple[str, str]] = []
    readable: list[str] = []
    last = after
    scanned = read = 0
    while len(items) < limit and scanned < SCAN_LIMIT and read < MAX_READ_BYTES:
        start = "-" if last is None else f"({last}"
        pending: Any = queue.redis.xpending_range(queue.stream, queue.group, start, "+", _CHUNK)
        if not pending:
            last = None  # read to the end
            break
        pipe = queue.redis.pipeline(transaction=False)
        for item in pending:
            entry_id = _text(item["message_id"])
            pipe.xrange(queue.stream, min=entry_id, max=entry_id)
        chunk: list[OpenEscalation] = []
        for item, rows in zip(pending, pipe.execute(), strict=True):
            last = _text(item["message_id"])
            scanned += 1
            read += _size(rows)
            found = _entry(item, rows)
            if isinstance(found, tuple):
                unreadable.append(found)
            elif found is not None:
                readable.append(found.entry_id)
                if _matches(found.message, reason, batch):
                    chunk.append(found)
            if len(items) + len(chunk) >= limit or scanned >= SCAN_LIMIT or read >= MAX_READ_BYTES:
                break
        # A second entry of a job resolved already is closed, as the claim closes it: listed,
        # a reviewer would open what no one can resolve.
        items += queue.without_resolved(chunk)
    # The gauge counts these apart from the waiting ones (no scrape reads the bodies).
    note_unreadable(
        queue.redis,
        queue.stream,
        queue.group,
        [e for e, _why in unreadable],
        readable=readable,
    )
    more = last is not None and bool(
        queue.redis.xpending_range(queue.stream, queue.group, f"({last}", "+", 1)
    )
    shown = unreadable[:_MAX_SHOWN_UNREADABLE]
    return Listing(
        items,
        [entry_id for entry_id, _why in shown],
        len(unreadable),
        unreadable_why=dict(shown),
        next_after=last if more else None,
        open_total=int(summary.get("pending") or 0),
    )


def _matches(message: EscalationMessage, reason: str | None, batch: str | None) -> bool:
    return not (reason and message.reason != reason) and not (batch and message.batch != batch)


def _size(rows: Any) -> int:
    if not rows:
        return 0
    return sum(len(k) + len(v) for k, v in rows[0][1].items())


def find_open(queue: EscalationQueue, entry_id: str) -> OpenEscalation | None:
    """The open escalation ``entry_id``; None if it is not open or cannot be read."""
    queue.sync()
    pending: Any = queue.redis.xpending_range(queue.stream, queue.group, entry_id, entry_id, 1)
    if not pending:
        return None
    rows: Any = queue.redis.xrange(queue.stream, min=entry_id, max=entry_id)
    found = _entry(pending[0], rows)
    if isinstance(found, tuple):
        note_unreadable(queue.redis, queue.stream, queue.group, [found[0]])
        return None
    if found is None:
        return None
    note_unreadable(queue.redis, queue.stream, queue.group, [], readable=[found.entry_id])
    return next(iter(queue.without_resolved([found])), None)


def _entry(pending: Any, rows: Any) -> OpenEscalation | tuple[str, str] | None:
    """The entry; its id and why if no reviewer can answer it; None if its body is gone."""
    entry_id = _text(pending["message_id"])
    problems: list[str] = []
    decoded = decode_entry(entry_id, rows, lambda _entry, why: problems.append(why))
    if decoded is None:
        return (entry_id, problems[0]) if problems else None
    message, reply_to = decoded
    holder = _text(pending["consumer"])
    return OpenEscalation(
        entry_id=entry_id,
        message=message,
        reply_to=reply_to,
        holder=None if holder == QUEUE_CONSUMER else holder,
        idle_s=int(pending["time_since_delivered"]) / 1000,
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
