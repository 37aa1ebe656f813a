"""Lines a producer rejected at submit, counted per batch beside the ledger.

A line the ``Client`` refuses (not JSON, a bad field, a model no provider serves) is never
queued, so no worker and no ledger row ever sees it; its ``rejected`` message goes straight
to the reply stream. Without a count of them, ``decisions ledger status --batch`` and the
console would show a batch of 240 lines as 235 jobs and nothing else. Each rejection of a
named batch is recorded here, in a Redis set under ``keys.batch_submit_rejections``, by its
rejection marker (the digest of the line): the same bad line submitted twice counts once,
a corrected one is a job. A line with no readable ``batch`` belongs to no batch and is not
counted (the terminal names it).
"""

from __future__ import annotations

from typing import Any, Final

import redis

from shared import keys
from shared.errors import FieldProblem, JobInvalid
from shared.rejection import Rejection, rejection_for
from shared.streams import Publication, ReplyPublisher

__all__ = [
    "SUBMIT_REJECTIONS_TTL_S",
    "publish_submit_rejection",
    "record_submit_rejection",
    "submit_rejection",
    "submit_rejections",
]

#: Kept as long as a batch's stored estimate (``shared.estimate.ESTIMATE_TTL_S``).
SUBMIT_REJECTIONS_TTL_S: Final = 30 * 24 * 3600


def submit_rejection(raw: Any, problems: list[FieldProblem], reply_to: str | None) -> Rejection:
    """The rejection of a job refused at submit, to the producer's ``reply_to`` (which the
    body's digest includes, so a terminal that names a line's stream id must build it here)."""
    if reply_to is not None and isinstance(raw, dict):
        raw = {**raw, "reply_to": reply_to}
    return rejection_for(raw, problems, reply_to=reply_to)


def publish_submit_rejection(
    publisher: ReplyPublisher,
    counts: redis.Redis | None,
    raw: Any,
    exc: JobInvalid,
    reply_to: str | None,
) -> None:
    """Publish the ``rejected`` message of a job the producer refused, and count it in its
    batch in ``counts`` (None: not counted, as for the embedded run's memory publisher)."""
    rejection = submit_rejection(raw, exc.problems, reply_to)
    publisher.publish(Publication.rejected(rejection))
    if counts is not None:
        record_submit_rejection(counts, rejection)


def record_submit_rejection(client: redis.Redis, rejection: Rejection) -> None:
    """Count ``rejection`` in its batch (nothing when it names none)."""
    batch = rejection.message.batch
    if not batch:
        return
    key = keys.batch_submit_rejections(batch)
    pipe = client.pipeline(transaction=True)
    pipe.sadd(key, rejection.marker)
    pipe.expire(key, SUBMIT_REJECTIONS_TTL_S)
    pipe.execute()


def submit_rejections(client: redis.Redis, batch: str) -> int:
    """How many distinct lines of ``batch`` were rejected at submit."""
    return int(client.scard(keys.batch_submit_rejections(batch)))
