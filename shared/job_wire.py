"""A job as it goes on the queue: stamped with its reply stream and time, then its JSON text."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, TypeAdapter

from shared.jobs import Job

__all__ = ["json_text", "stamp_job", "wire_text"]

_STAMP = TypeAdapter(AwareDatetime)


def stamp_job(raw: dict[str, Any], reply_to: str | None, now: datetime) -> dict[str, Any]:
    """``raw`` with its reply stream and submission time set, so that one validation sees
    the final job (a ``model_copy`` after it costs as much as a tenth of the validation).

    The time goes in as the text a dump of the job would hold, so that the dict stays JSON.
    """
    stamps: dict[str, Any] = {}
    if reply_to is not None:
        stamps["reply_to"] = reply_to
    # A naive ``now`` is left to the copy after validation, which never checked it.
    if raw.get("submitted_at") is None and now.utcoffset() is not None:
        # The serializer itself: TypeAdapter.dump_python's checks cost twice the work.
        stamps["submitted_at"] = _STAMP.serializer.to_python(now, mode="json")
    return {**raw, **stamps} if stamps else raw


# Plain JSON values only (no NaN, no default hook): anything else takes the dump's way.
# No circular check (a tenth of the encoding): a cycle ends in RecursionError, caught below.
# Compact UTF-8, the very bytes DECISIONS_MAX_JOB_BYTES measures (shared.strict_json): with
# json's defaults a three-byte 漢 went as a six-byte escape and every separator took a space,
# so a job well inside the job limit could be refused for its message's size.
_STRICT_JSON = json.JSONEncoder(
    allow_nan=False, check_circular=False, ensure_ascii=False, separators=(",", ":")
)


def json_text(value: Any) -> str:
    """A plain JSON value's text as a job goes in a message (compact UTF-8); ``TypeError``,
    ``ValueError`` or ``RecursionError`` for anything else."""
    return _STRICT_JSON.encode(value)


def wire_text(job: Job, stamped: dict[str, Any] | None) -> str:
    """The job's JSON as it goes in a message.

    The dict it was validated from is sent as it is when it is plain JSON: the worker
    re-parses every job (``parse_job``), and parsing that dict is what gave ``job``
    (every model forbids extra fields, so nothing the model dropped can ride along). The
    text is taken now, so that a caller changing its dicts later changes nothing sent.
    Anything else (a job object) is sent as the job's JSON dump. Either way the text is
    compact UTF-8: the worker reads the body as UTF-8 (``content_encoding``).
    """
    if stamped is not None:
        try:
            return _STRICT_JSON.encode(stamped)
        except (TypeError, ValueError, RecursionError):
            pass
    return _STRICT_JSON.encode(job.model_dump(mode="json", exclude_none=True))
