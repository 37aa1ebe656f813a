"""Packing across jobs: decide jobs of one batch about the same state, for the same provider
and model, answered by one request. Opt-in: a job's ``pack`` (``submit --pack`` sets it on a
whole batch).

Three parties plan it the same way, so that a dry run counts the requests the worker sends:

- the client puts the packable jobs of a batch in Celery messages by ``pack_key``, up to
  ``settings.pack_chunk_size`` jobs of one key a message and under the message cap, in
  submission order (``shared.message_size.MessageChunks``);
- the worker splits each message's jobs of one key, in order, into requests as full as the
  provider's limits allow (``shared.judgments.packing``), never splitting a job
  (``pack_requests``);
- ``shared.estimate`` runs the same two steps and sends nothing.

In a request, question ``qid`` of the job at position ``i`` is ``"{i}.{qid}"``
(``packed_qid``): ids are the caller's and never shown to the model, so the prefix changes
nothing the model sees, and each job gets back exactly its own questions.

A verified job is never packed (its verifying decisions are its own), nor a job whose
questions would not fit in one request on their own: it is sent alone, as without ``pack``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.canonical import canonical_bytes, digest_of
from shared.errors import JobInvalid
from shared.jobs import AnyJob, DecideJob
from shared.judgments.packing import PackLimits, pack, request_overhead, split_in_order

__all__ = ["pack_key", "pack_requests", "packed_qid", "packed_questions"]

Questions = Mapping[str, dict[str, Any]]


def pack_key(job: AnyJob, default_provider: str) -> str | None:
    """Which jobs may share a request with this one; None if it may share with none."""
    if not isinstance(job, DecideJob) or not job.pack or job.verify is not None:
        return None
    return digest_of(
        {
            "batch": job.batch,
            "provider": job.provider or default_provider,
            "model": job.model,
            "state": job.state,
        }
    )


def packed_qid(position: int, qid: str) -> str:
    return f"{position}.{qid}"


def packed_questions(members: Sequence[Questions]) -> dict[str, dict[str, Any]]:
    """The questions of one packed request: every member's, under ``packed_qid``."""
    return {
        packed_qid(position, qid): question
        for position, questions in enumerate(members)
        for qid, question in questions.items()
    }


def pack_requests(state: Any, members: Sequence[Questions], limits: PackLimits) -> list[list[int]]:
    """Indexes into ``members`` (each a job's wire questions), split into requests in order.

    Each request is filled as far as ``limits`` allow before the next starts. A member whose
    questions would not go in one request on their own gets a request of its own: the worker
    sends it alone, where the provider's own check rejects it, naming the field.
    """
    return split_in_order(
        len(members),
        questions=lambda index: len(members[index]),
        entry_bytes=lambda index, position: _entries_size(position, members[index]),
        empty_size=request_overhead(state),
        limits=limits,
        alone=lambda index: not _fits_alone(state, members[index], limits),
    )


def _entries_size(position: int, questions: Questions) -> int:
    # "position.id":{...} for each question, as ``packed_questions`` writes them
    return sum(
        len(canonical_bytes(packed_qid(position, qid))) + 1 + len(canonical_bytes(question))
        for qid, question in questions.items()
    )


def _fits_alone(state: Any, questions: Questions, limits: PackLimits) -> bool:
    try:
        return len(pack(state, list(questions.items()), limits)) == 1
    except JobInvalid:
        return False


