"""Submit-time checks of sift, route and verified decide jobs against the worker's providers.

A judgment job is checked by planning it in full (``worker.kinds.judgments.plan``): every request
it would send is prepared, nothing is sent. Other jobs go to the checker given; a plain
decide job with images is then prepared too, so ``decisions submit``, ``Client`` and the dry
run refuse an image token the model cannot read, naming where it stands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.errors import DecisionProviderError, FieldProblem, JobInvalid
from shared.jobs import AnyJob, DecideJob, RouteJob, SiftJob
from worker.kinds.decide import DECIDE_STEP, decide_request
from worker.kinds.image_store import with_stand_ins
from worker.kinds.judgments.plan import plan_route, plan_sift, plan_verified
from worker.providers import ProviderRegistry

__all__ = ["image_problems", "judgment_checker", "plan_problems"]

JobCheck = Callable[[Any], list[FieldProblem]]


def plan_problems(job: AnyJob, providers: ProviderRegistry) -> list[FieldProblem] | None:
    """The problems of planning a judgment job (empty: it plans); None for any other job."""
    job = with_stand_ins(job)  # image refs are fetched by the worker only
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
        if problems is not None:
            return problems
        # The other checks prepare a decide job's request too: refs have no bytes here.
        problems = others(with_stand_ins(job))
        if not problems and isinstance(job, DecideJob) and job.images is not None:
            problems = image_problems(job, providers)
        return problems

    return check


def image_problems(job: DecideJob, providers: ProviderRegistry) -> list[FieldProblem]:
    """Where a decide job's image tokens cannot stand for its model (prepared, not sent)."""
    provider = providers.get(job.provider or providers.default_name)
    try:
        provider.prepare(decide_request(with_stand_ins(job)), step=DECIDE_STEP)
    except DecisionProviderError as exc:
        return [exc.problem(exc.field or "images")]
    return []
