"""Every open escalation of a queue, oldest first, each as ``EscalationQueue.get`` reads it:
what tests compare with. The product lists a page at a time (``shared.escalation_listing``)
and claims through ``EscalationQueue``'s own pages; its every-entry ``open`` had no caller
left but tests.

Through ``get``, an entry is read as a claim reads it: one that does not parse is skipped
and reported, one whose body is gone is acknowledged and reported, one of a job resolved
already is closed."""

from __future__ import annotations

from typing import Any

from shared.errors import EscalationNotFound
from shared.escalations import EscalationQueue, OpenEscalation

__all__ = ["open_escalations"]

#: XPENDING rows read a call.
_PAGE = 1_000


def open_escalations(queue: EscalationQueue) -> list[OpenEscalation]:
    queue.sync()
    found = []
    low = "-"
    while True:
        pending: Any = queue.redis.xpending_range(queue.stream, queue.group, low, "+", _PAGE)
        for row in pending:
            try:
                found.append(queue.get(_text(row["message_id"])))
            except EscalationNotFound:  # skipped, gone or closed: reported by the queue
                continue
        if len(pending) < _PAGE:
            return found
        low = "(" + _text(pending[-1]["message_id"])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
