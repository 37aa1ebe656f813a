"""Where a worker's CPU goes: py-spy's raw stacks (``--gil``: only the thread holding the
GIL is sampled, so the shares are shares of the process's Python CPU) summed by component.

Each sample is charged to the first component of ``COMPONENTS`` that any frame of its stack
belongs to: a JSON encode inside the ledger is the ledger's, a socket read inside httpx is
httpx's, and only what no library claims is the runner's or the event loop's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

__all__ = ["COMPONENTS", "summarise"]

#: (component, substrings of a frame's file that mark it), most specific first.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ledger (SQLAlchemy, drivers, group commit)",
     ("sqlalchemy/", "psycopg", "sqlite3", "worker/ledger/")),
    ("HTTP client (httpx, httpcore, h11, anyio)", ("httpx/", "httpcore/", "h11/", "anyio/")),
    ("reply streams (redis-py)", ("redis/", "shared/streams.py", "worker/delivery/sinks.py")),
    ("Celery and kombu (messages, pool)", ("celery/", "kombu/", "billiard/")),
    ("logging (structlog, logging)", ("structlog/", "logging/", "worker/process/logs.py")),
    ("pydantic and JSON", ("pydantic", "json/", "shared/jobs.py", "shared/replies.py")),
    ("providers and runner (decoding, receipts, verdicts)",
     ("worker/kinds/dispatch.py", "worker/providers/", "shared/verdicts.py", "shared/")),
    ("asyncio event loop and threads", ("asyncio/", "threading.py", "concurrent/", "selectors")),
)


def _component(frames: list[str]) -> str:
    for name, marks in COMPONENTS:
        if any(mark in frame for frame in frames for mark in marks):
            return name
    return "other"


def summarise(raw: Path) -> dict[str, float]:
    """Share (0..1) of samples per component, largest first."""
    counts: Counter[str] = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        counts[_component(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {name: round(n / total, 3) for name, n in counts.most_common()}
