"""Submit-time checks of the worker's registries: is this provider, runtime or model known?

``decisions submit`` runs them before a job goes on the queue, so a job naming an unknown
provider, runtime or model is ``rejected`` at once (the worker checks again, and also checks
handler names, which a producer's machine may not be able to import). A decide job is
prepared in full by the worker's own code (``worker.kinds.decide.prepare_decide``): the provider's
limits and models refuse at submit what the worker would refuse before sending.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.errors import FieldProblem, JobInvalid
from shared.jobs import DecideJob, MenuJob
from worker.kinds.decide import prepare_decide
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry

__all__ = ["job_checker"]


def job_checker(
    providers: ProviderRegistry, runtimes: RuntimeRegistry
) -> Callable[[DecideJob | MenuJob], list[FieldProblem]]:
    def check(job: DecideJob | MenuJob) -> list[FieldProblem]:
        if isinstance(job, MenuJob):
            return runtimes.check(job.runtime.provider, job.runtime.model)
        try:
            prepare_decide(job, providers)
        except JobInvalid as exc:
            return exc.problems
        return []

    return check
