"""What a reviewer answers for a job of any image-carrying kind, from the job alone.

Each kind's escalation builder (``shared.verdicts``, ``shared.judgments.route``, ``sift``)
puts its own context in the message. The delivery protocol escalates one job without its
kind (a redelivery that cannot fetch the job's images again, so cannot plan it:
``worker.delivery.lifecycle``), and asks here, so that the reviewer sees the same questions
and state that kind's escalation would show.
"""

from __future__ import annotations

from typing import Any

from shared.jobs import AnyJob, DecideJob, RouteJob, SiftJob
from shared.judgments.route import route_context
from shared.judgments.sift import sift_context
from shared.verdicts import decide_context

__all__ = ["escalation_context"]


def escalation_context(job: AnyJob) -> dict[str, Any]:
    """The kind's own escalation context; ``{}`` for a kind with none of its own here (a
    menu's context is its session's, which only a running session has)."""
    if isinstance(job, RouteJob):
        return route_context(job)
    if isinstance(job, SiftJob):
        return sift_context(job)
    if isinstance(job, DecideJob):
        return decide_context(job)
    return {}
