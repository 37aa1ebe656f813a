"""A Celery message of jobs, bounded in bytes before it is built (``DECISIONS_MAX_MESSAGE_BYTES``).

A worker refuses an item on the queue longer than ``Settings.max_message_bytes`` before it
decodes a byte of it (``worker.process.broker``): a 300 MB message, decoded, parsed and
base64-decoded, took a worker to 2 GB and, killed for it, the next one too. The client
never builds such a message: its chunks are bounded by bytes as well as by count
(``MessageChunks``), and a job too big for a message of its own is rejected
(``oversize_problem``).

What a job costs a message on the Redis queue (``job_cost``): its JSON text
(``shared.job_wire.wire_text``, compact UTF-8) and the ``,`` after it go in the body, which kombu
base64-encodes (4 bytes for every 3 begun) into its JSON envelope. Summing each job's
rounded-up share never under-counts the whole body's. The rest, whatever the jobs, is
``MESSAGE_OVERHEAD_BYTES``: measured, kombu's envelope with Celery's headers and the body's
frame (``[[], {"jobs": [...]}, {...}]``) is about 1 KiB; the margin covers a 255-character
host name in ``origin`` and a trace context's ``traceparent`` and ``tracestate`` (512
characters at most) many times over.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Final, Generic, TypeVar

__all__ = [
    "MAX_MESSAGE_SETTING",
    "MESSAGE_OVERHEAD_BYTES",
    "MessageChunks",
    "job_cost",
    "message_cap_problem",
    "one_job_message_bytes",
    "oversize_problem",
]

T = TypeVar("T")

#: The variable that sets the cap, named in every refusal.
MAX_MESSAGE_SETTING: Final = "DECISIONS_MAX_MESSAGE_BYTES"
#: A message's bytes besides its jobs' (see the module doc): an upper bound, not a measure.
MESSAGE_OVERHEAD_BYTES: Final = 16 * 1024
#: The separator after each job's text in the body's list.
_SEPARATOR_BYTES = 1


def _base64_bytes(raw: int) -> int:
    return 4 * -(-raw // 3)


def job_cost(text: str) -> int:
    """At least the bytes ``text`` (a job's JSON) adds to a message on the Redis queue."""
    # The encode only for a text that holds more than ASCII (one byte a character).
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return _base64_bytes(size + _SEPARATOR_BYTES)


def one_job_message_bytes(job_bytes: int) -> int:
    """The least ``max_message_bytes`` a message holding one job of ``job_bytes`` needs."""
    return MESSAGE_OVERHEAD_BYTES + _base64_bytes(job_bytes + _SEPARATOR_BYTES)


def message_cap_problem(max_message_bytes: int, max_job_bytes: int) -> str | None:
    """Why a cap cannot hold one job at the job limit (the settings' check), or None."""
    needed = one_job_message_bytes(max_job_bytes)
    if max_message_bytes >= needed:
        return None
    return (
        f"{MAX_MESSAGE_SETTING}={max_message_bytes} is too small for one job of "
        f"DECISIONS_MAX_JOB_BYTES={max_job_bytes} (base64 in kombu's envelope: {needed} "
        f"bytes); set {MAX_MESSAGE_SETTING} to at least {needed} or lower DECISIONS_MAX_JOB_BYTES"
    )


def oversize_problem(cost: int, max_message_bytes: int) -> str | None:
    """Why a job of ``cost`` (``job_cost``) cannot go in any message, or None."""
    alone = MESSAGE_OVERHEAD_BYTES + cost
    if alone <= max_message_bytes:
        return None
    return (
        f"its message would take up to {alone} bytes on the queue (its JSON, base64 in "
        f"kombu's envelope); at most {max_message_bytes} ({MAX_MESSAGE_SETTING})"
    )


class MessageChunks(Generic[T]):
    """Items by key, handed out as messages of up to ``count`` items of one key whose
    estimate (``MESSAGE_OVERHEAD_BYTES`` and each item's cost) is at most ``max_bytes``.

    An item is added with its cost; the caller keeps out one that could not go in a message
    alone (``oversize_problem``). A message leaves when the next item would take it over
    ``max_bytes`` or when it holds ``count``; its key then starts over at the end of the
    order."""

    def __init__(self, count: int, max_bytes: int) -> None:
        self.count = count
        self.max_bytes = max_bytes
        self._waiting: dict[Hashable, tuple[list[T], int]] = {}

    def add(self, key: Hashable, item: T, cost: int) -> list[list[T]]:
        """Hold ``item``; the messages now ready, in order (the one it did not fit in, the
        one it filled)."""
        ready: list[list[T]] = []
        items, used = self._waiting.get(key, ([], MESSAGE_OVERHEAD_BYTES))
        if items and used + cost > self.max_bytes:
            ready.append(self._waiting.pop(key)[0])
            items, used = [], MESSAGE_OVERHEAD_BYTES
        items.append(item)
        if len(items) >= self.count:
            self._waiting.pop(key, None)
            ready.append(items)
        else:
            self._waiting[key] = (items, used + cost)  # a key held keeps its place
        return ready

    def drain(self) -> Iterator[list[T]]:
        """The messages not yet full, in the order their keys started them."""
        while self._waiting:
            key = next(iter(self._waiting))
            yield self._waiting.pop(key)[0]
