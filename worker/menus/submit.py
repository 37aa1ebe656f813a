"""Submit-time checks of the worker's registries: is this provider, runtime or model known?

``decisions submit`` runs them before a job goes on the queue, so a job naming an unknown
provider, runtime or model is ``rejected`` at once (the worker checks again, and also checks
handler names, which a producer's machine may not be able to import).
"""

from __future__ import annotations

from collections.abc import Callable

from shared.errors import FieldProblem
from shared.jobs import DecideJob, MenuJob
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry

__all__ = ["job_checker"]


def job_checker(
    providers: ProviderRegistry, runtimes: RuntimeRegistry
) -> Callable[[DecideJob | MenuJob], list[FieldProblem]]:
    def check(job: DecideJob | MenuJob) -> list[FieldProblem]:
        if isinstance(job, MenuJob):
            return runtimes.check(job.runtime.provider, job.runtime.model)
        return providers.check(job.provider, job.model)

    return check
