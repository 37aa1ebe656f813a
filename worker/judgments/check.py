"""Submit-time checks of sift, route and verified decide jobs against the worker's providers.

A judgment job is checked by planning it in full (``worker.judgments.plan``): every request
it would send is prepared, nothing is sent. Other jobs go to the checker given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.errors import FieldProblem, JobInvalid
from shared.jobs import AnyJob, DecideJob, RouteJob, SiftJob
from worker.judgments.plan import plan_route, plan_sift, plan_verified
from worker.providers import ProviderRegistry

__all__ = ["judgment_checker", "plan_problems"]

JobCheck = Callable[[Any], list[FieldProblem]]


def plan_problems(job: AnyJob, providers: ProviderRegistry) -> list[FieldProblem] | None:
    """The problems of planning a judgment job (empty: it plans); None for any other job."""
    try:
        if isinstance(job, SiftJob):
            plan_sift(job, providers)
        elif isinstance(job, RouteJob):
            plan_route(job, providers)
        elif isinstance(job, DecideJob) and job.verify is not None:
            plan_verified(job, providers)
        else:
            return None
    except JobInvalid as exc:
        return exc.problems
    return []


def judgment_checker(
    providers: ProviderRegistry, others: JobCheck
) -> Callable[[AnyJob], list[FieldProblem]]:
    def check(job: AnyJob) -> list[FieldProblem]:
        problems = plan_problems(job, providers)
        return others(job) if problems is None else problems

    return check
