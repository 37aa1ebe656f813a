"""The resolution ``decisions trace`` shows of an escalated job: who answered it, when, and
the answer, read from Redis (the resolved record and the resolution message in the job's
reply stream). What cannot be read (Redis down, the entry trimmed, not a resolution) is
said in its place, never raised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from rich.markup import escape

from shared import keys
from shared.redis_connect import redis_client
from shared.replies import ResolutionMessage, parse_reply
from shared.settings import get_settings
from worker.ledger import JobRow

__all__ = [
    "Resolution",
    "lookup_resolution",
    "resolution_json",
    "resolution_label",
    "resolution_of",
]


@dataclass(frozen=True)
class Resolution:
    """A reviewer's answer to the job's escalation, as recorded in Redis."""

    reviewer: str
    at: datetime | None
    answer: Any
    #: Why it could not be read in full (Redis down, the reply entry trimmed); None if read.
    problem: str | None = None


def resolution_of(client: redis.Redis, row: JobRow) -> Resolution | None:
    """The job's resolution: who and when from ``keys.resolved_record``, the answer from the
    resolution message in the job's reply stream; None if nobody resolved it."""
    raw: Any = client.hgetall(keys.resolved_record(row.job_id))
    record = {_text(k): _text(v) for k, v in raw.items()}
    if not record:
        return None
    at_ms = record.get("resolved_at_ms")
    at = datetime.fromtimestamp(int(at_ms) / 1000, UTC) if at_ms and at_ms.isdigit() else None
    reviewer = record.get("reviewer", "?")
    entry = record.get("reply_entry_id")
    if not entry or not keys.is_reply_name(row.reply_to):
        return Resolution(reviewer, at, None, "the resolution message's entry is not recorded")
    rows: Any = client.xrange(keys.reply_stream(row.reply_to), min=entry, max=entry)
    if not rows:
        return Resolution(reviewer, at, None, f"entry {entry} is no longer in {row.reply_to!r}")
    fields = {_text(k): _text(v) for k, v in rows[0][1].items()}
    try:
        message = parse_reply(fields.get("message", ""))
    except ValueError:
        return Resolution(reviewer, at, None, f"entry {entry} is not a readable message")
    if not isinstance(message, ResolutionMessage):
        return Resolution(
            reviewer, at, None, f"entry {entry} is a {message.type}, not a resolution"
        )
    return Resolution(message.reviewer or reviewer, at, message.answer)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def resolution_label(found: Resolution) -> str:
    """The resolution as the trace's last branch (rich markup)."""
    when = found.at.strftime("%Y-%m-%d %H:%M:%S UTC") if found.at else "at an unknown time"
    line = f"[bold green]resolved[/] by [bold]{escape(found.reviewer)}[/] {when}"
    if found.problem:
        return f"{line}\n[yellow]answer not shown: {escape(found.problem)}[/]"
    answer = json.dumps(found.answer, ensure_ascii=False, sort_keys=True)
    return f"{line}\nanswer: {escape(answer)}"


def resolution_json(resolution: Resolution | str | None) -> Any:
    """The resolution in ``decisions trace --json``."""
    if isinstance(resolution, Resolution):
        return {
            "reviewer": resolution.reviewer,
            "at": resolution.at.isoformat() if resolution.at else None,
            "answer": resolution.answer,
            "problem": resolution.problem,
        }
    return None if resolution is None else {"problem": resolution}


def lookup_resolution(row: JobRow) -> Resolution | str | None:
    """Only an escalated job can have one; Redis out of reach is said, not an error."""
    if row.terminal_type != "escalation":
        return None
    client = redis_client(get_settings().redis_url)
    try:
        return resolution_of(client, row)
    except redis.RedisError as exc:
        return f"Redis unreachable ({type(exc).__name__}); not known whether it was resolved"
    finally:
        client.close()
