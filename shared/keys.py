"""Every Redis key and stream name decision-worker uses, in one place."""

from __future__ import annotations

__all__ = [
    "CELERY_QUEUE",
    "ESCALATION_GROUP",
    "ESCALATION_STREAM",
    "PREFIX",
    "REJECTED_STREAM",
    "RUN_JOBS_TASK",
    "batch_estimate",
    "escalation_claim",
    "published_marker",
    "rate_inflight",
    "rate_pause",
    "rate_window",
    "reply_stream",
]

PREFIX = "decisions"

#: The Celery queue the producers publish to and the workers consume.
CELERY_QUEUE = "decisions"
#: The one task a producer may name: it runs a chunk of jobs.
RUN_JOBS_TASK = "decisions.run_jobs"

#: Rejections of jobs whose own ``reply_to`` is unusable land here instead.
REJECTED_STREAM = f"{PREFIX}:rejected"

#: Every escalation is also appended here; reviewers read it through ESCALATION_GROUP.
ESCALATION_STREAM = f"{PREFIX}:escalations"
ESCALATION_GROUP = "reviewers"


def reply_stream(reply_to: str) -> str:
    """A job's ``reply_to`` is the stream's name as the producer gave it."""
    return reply_to


def published_marker(stream: str, job_id: str) -> str:
    """Set, in the same Lua call as the XADD, once a job's terminal message is on ``stream``."""
    return f"{PREFIX}:published:{stream}:{job_id}"


def escalation_claim(escalation_id: str) -> str:
    """Which reviewer holds an escalation, with a TTL (a vanished reviewer lets go)."""
    return f"{PREFIX}:escalation-claim:{escalation_id}"


def rate_inflight(provider: str) -> str:
    """Sorted set of in-flight request tokens for a provider, scored by their expiry."""
    return f"{PREFIX}:limits:{provider}:inflight"


def rate_pause(provider: str) -> str:
    """Until when (ms since the epoch, Redis time) a provider's Retry-After pauses the fleet."""
    return f"{PREFIX}:limits:{provider}:pause"


def rate_window(provider: str) -> str:
    """A provider's rate: the theoretical time of its next send (GCRA, ms, Redis time)."""
    return f"{PREFIX}:limits:{provider}:window"


def batch_estimate(batch: str) -> str:
    """A batch's cost estimate (``shared.estimate.Estimate`` as JSON), stored at submit."""
    return f"{PREFIX}:estimate:{batch}"
