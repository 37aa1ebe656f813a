"""Turning an invalid job into its ``rejected`` message, the same way in producer and worker."""

from __future__ import annotations

import re
from typing import Any

from shared import keys
from shared.canonical import digest_of
from shared.errors import FieldProblem
from shared.replies import RejectedMessage

__all__ = ["Rejection", "rejection_for"]

_STREAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._\-/]{0,199}$")


class Rejection:
    """Where a rejected job's message goes, under which publish-once marker."""

    def __init__(self, stream: str, job_id: str, marker: str, message: RejectedMessage) -> None:
        self.stream = stream
        self.job_id = job_id
        self.marker = marker
        self.message = message


def rejection_for(
    raw: Any, problems: list[FieldProblem], *, reply_to: str | None = None
) -> Rejection:
    """The rejected message of ``raw``: to its ``reply_to`` if that is usable, else REJECTED_STREAM.

    ``reply_to`` is where the producer asked replies to go when the body itself cannot say
    (a line that is not JSON). The publish marker is keyed by the body's digest, not the job
    id alone, so that a corrected job resubmitted under the same id still gets its own
    terminal message.
    """
    body = raw if isinstance(raw, dict) else {}
    try:
        digest = digest_of(raw)
    except (TypeError, ValueError):
        digest = digest_of(repr(raw))
    job_id = body.get("id") if isinstance(body.get("id"), str) and body.get("id") else None
    reply_to = body.get("reply_to", reply_to)
    stream = reply_to if isinstance(reply_to, str) and _STREAM_NAME.match(reply_to) else None
    message = RejectedMessage(
        job_id=job_id or f"invalid-{digest[:16]}",
        batch=body.get("batch") if isinstance(body.get("batch"), str) else None,
        metadata=body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
        problems=[p.as_dict() for p in problems],
    )
    return Rejection(
        stream=stream or keys.REJECTED_STREAM,
        job_id=message.job_id,
        marker=f"rejected:{digest}",
        message=message,
    )
