"""The audit log: every claim, release and resolution of an escalation (who, when, what).

Written by ``shared.escalations.EscalationQueue`` itself, so a move made in the console, with
``decisions escalations`` or through the queue's Python API is recorded alike.

Two Redis streams, appended in one round trip: every entry (``keys.audit_log``) and the
entries of one batch (``keys.batch_audit_log``, what the batch page shows), each capped
(approximately: ``MAXLEN ~``) so the log cannot grow without bound. A stream gives each entry
its time and order for free, and Redis is where the escalations already live. A resolution's
answer is kept whole up to ``ANSWER_CHARS``; a bigger one (a 10,000-item sift) as a count of
its values and its SHA-256, the answer itself being on the job's reply stream.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import redis

from shared import keys
from shared.replies import EscalationMessage

__all__ = ["ANSWER_CHARS", "Action", "AuditEntry", "batch_audit", "record"]

Action = Literal["claim", "release", "resolve"]
ANSWER_CHARS: Final = 4000
_ALL_MAXLEN: Final = 100_000
_BATCH_MAXLEN: Final = 10_000
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    action: str
    reviewer: str
    entry_id: str
    job_id: str
    batch: str
    reason: str
    answer: str


def record(
    client: redis.Redis,
    action: Action,
    reviewer: str,
    entry_id: str,
    message: EscalationMessage,
    answer: Any = None,
) -> None:
    """Append one entry; a Redis failure is logged, not raised (the move itself was made)."""
    fields = {
        "at": datetime.now(UTC).isoformat(),
        "action": action,
        "reviewer": reviewer,
        "entry_id": entry_id,
        "job_id": message.job_id,
        "batch": message.batch or "",
        "reason": message.reason,
        "answer": _answer_text(answer) if action == "resolve" else "",
    }
    try:
        pipe = client.pipeline(transaction=False)
        pipe.xadd(keys.audit_log(), fields, maxlen=_ALL_MAXLEN, approximate=True)  # type: ignore[arg-type]
        if message.batch:
            pipe.xadd(
                keys.batch_audit_log(message.batch),
                fields,  # type: ignore[arg-type]
                maxlen=_BATCH_MAXLEN,
                approximate=True,
            )
        pipe.execute()
    except redis.RedisError as exc:
        _log.error(
            "audit entry not written (%s %s by %s): %s", action, entry_id, reviewer, exc
        )


def batch_audit(client: redis.Redis, batch: str, *, count: int = 200) -> list[AuditEntry]:
    """The batch's latest entries, newest first."""
    rows: Any = client.xrevrange(keys.batch_audit_log(batch), count=count)
    found = []
    for _, raw in rows:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        try:
            at = datetime.fromisoformat(fields.get("at", ""))
        except ValueError:
            continue
        found.append(
            AuditEntry(
                at=at,
                action=fields.get("action", ""),
                reviewer=fields.get("reviewer", ""),
                entry_id=fields.get("entry_id", ""),
                job_id=fields.get("job_id", ""),
                batch=fields.get("batch", ""),
                reason=fields.get("reason", ""),
                answer=fields.get("answer", ""),
            )
        )
    return found


def _answer_text(answer: Any) -> str:
    text = json.dumps(answer, ensure_ascii=False, sort_keys=True)
    if len(text) <= ANSWER_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if isinstance(answer, dict):
        counts = Counter(json.dumps(v, ensure_ascii=False) for v in answer.values())
        common = ", ".join(f"{n} {value}" for value, n in counts.most_common(5))
        return f"{len(answer)} answers: {common} (sha256 {digest}…)"
    return f"{len(text)} characters of JSON (sha256 {digest}…)"


def _text(value: Any) -> str:
    # Replaced, not raised: one entry of stray bytes must not hide the batch's others.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
