"""Turning an invalid job into its ``rejected`` message, the same way in producer and worker."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from shared import keys, strict_json
from shared.canonical import digest_of, sha256_hex
from shared.errors import FieldProblem, NotStrictJSON
from shared.limits import MAX_ID_CHARS, echoable_metadata, refused_job
from shared.replies import RejectedMessage

__all__ = ["MAX_PROBLEMS", "Rejection", "bounded", "rejection_for"]


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
    digest = _digest(raw, problems)
    if isinstance(raw, bytes | bytearray | str):  # a text job: named by its id if it reads
        with contextlib.suppress(NotStrictJSON):
            raw = strict_json.loads(raw)
    body = raw if isinstance(raw, dict) else {}
    job_id = body.get("id")
    if isinstance(body, strict_json.DuplicateKeys) and "id" in body.duplicates:
        job_id = None  # which one? neither: named by its digest
    if not (_carried(job_id) and job_id):
        job_id = None
    reply_to = body.get("reply_to", reply_to)
    usable = isinstance(reply_to, str) and keys.reply_to_problem(reply_to) is None
    stream = reply_to if usable else None
    batch = body.get("batch")
    message = RejectedMessage(
        job_id=job_id or f"invalid-{digest[:16]}",
        # Printable, as the id: a lone surrogate in it reached a Redis key (the batch's count
        # of rejections) and raised UnicodeEncodeError mid-submit (found by an attack).
        batch=batch if _carried(batch) else None,
        metadata=echoable_metadata(body.get("metadata")),
        problems=[p.as_dict() for p in bounded(problems)],
    )
    return Rejection(
        stream=stream or keys.REJECTED_STREAM,
        job_id=message.job_id,
        marker=f"rejected:{digest}",
        message=message,
    )


#: A rejection names at most this many problems (a 10,000-item sift whose every item is
#: wrong would otherwise carry 10,000 of them); the last line says how many more there were.
MAX_PROBLEMS = 50


def bounded(problems: list[FieldProblem]) -> list[FieldProblem]:
    """``problems`` with repeats dropped, at most ``MAX_PROBLEMS`` and a count of the rest."""
    distinct = list(dict.fromkeys(problems))
    if len(distinct) <= MAX_PROBLEMS:
        return distinct
    rest = len(distinct) - MAX_PROBLEMS + 1
    return [*distinct[: MAX_PROBLEMS - 1], FieldProblem("(more)", f"{rest} more problems")]


def _carried(value: Any) -> bool:
    """Whether a reply can carry ``value`` as a job's id or batch: a short printable string.
    Lone surrogates are not printable, so what passes is always UTF-8."""
    return isinstance(value, str) and len(value) <= MAX_ID_CHARS and value.isprintable()


def _digest(raw: Any, problems: list[FieldProblem]) -> str:
    """The digest of the body; of what a reply can say of it (its id, stream, batch and
    problems: ``refused_job``) when the body itself is not JSON (NaN, 5,000 levels, a set,
    a lone surrogate)."""
    if isinstance(raw, bytes | bytearray):
        return sha256_hex(bytes(raw))
    with contextlib.suppress(TypeError, ValueError, RecursionError):
        return digest_of(raw)
    stub = refused_job(raw, problems)
    with contextlib.suppress(ValueError):
        return digest_of(stub)
    # A lone surrogate in the stub's id or batch (valid JSON text, "a\ud800b", but no UTF-8):
    # written escaped, so the line is rejected naming its field instead of raising
    # UnicodeEncodeError from here (found by an attack). The stub is strings only: this dumps.
    text = json.dumps(stub, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return sha256_hex(text.encode("ascii"))
