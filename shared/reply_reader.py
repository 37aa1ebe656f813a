"""Reading a reply stream as a producer: each job's terminal message once.

A reply stream may hold a job's message twice (re-published after a crash without its
marker) and entries that are not replies at all: a stream is anyone's to write, and an
older or newer release may have written a shape this one does not read. Such an entry is
skipped and logged, and only a reply that parses counts its job as answered, so the job's
real reply after it is still yielded (counted first, it was dropped as a duplicate).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from pydantic import ValidationError

from shared.replies import TERMINAL_TYPES, Reply, parse_reply
from shared.streams import follow_stream, read_stream

__all__ = ["terminal_replies"]

log = logging.getLogger(__name__)


def terminal_replies(
    client: redis.Redis,
    stream: str,
    *,
    job_ids: Iterable[str] | None = None,
    follow: bool = False,
    timeout_s: float | None = None,
    include_resolutions: bool = False,
) -> Iterator[Reply]:
    """Terminal messages on ``stream``, each job's once (a re-published duplicate is dropped).

    With ``job_ids``, stops once every one of them has its terminal message (following the
    stream as needed); with ``follow``, waits for new messages; else reads what is there.
    ``TimeoutError`` once ``timeout_s`` passed with jobs still unanswered.
    """
    wanted = set(job_ids) if job_ids is not None else None
    seen: set[tuple[str, str]] = set()
    done: set[str] = set()
    give_up = None if timeout_s is None else datetime.now(UTC) + timedelta(seconds=timeout_s)
    entries: Iterator[Any] = (
        follow_stream(client, stream, after="0-0")
        if follow or wanted is not None
        else read_stream(client, stream)
    )
    for entry in entries:
        if wanted is not None and wanted <= done:
            return
        if give_up is not None and datetime.now(UTC) > give_up:
            raise TimeoutError(f"{len(wanted or ()) - len(done)} job(s) still without a reply")
        if entry is None:
            continue
        key = (entry.job_id, entry.type)
        if key in seen:
            continue
        is_terminal = entry.type in TERMINAL_TYPES
        if not is_terminal and not (include_resolutions and entry.type == "resolution"):
            continue
        if wanted is not None and entry.job_id not in wanted:
            continue
        try:
            reply = parse_reply(entry.message)
        except (ValueError, ValidationError):
            log.warning("skipped reply entry %s of %s: not a reply", entry.entry_id, stream)
            continue
        seen.add(key)
        if is_terminal:
            done.add(entry.job_id)
        yield reply
        if wanted is not None and wanted <= done:
            return
