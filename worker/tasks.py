"""The one task a producer may name: run a chunk of jobs (JSON objects) to their replies."""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery, Task

from shared import keys
from shared.errors import SchemaBehind
from worker import context
from worker.faults import fault_point
from worker.ledger import LedgerUnavailable

__all__ = ["register", "run_jobs"]

#: Retrying a chunk whose ledger was unavailable is safe: nothing unclaimed was sent.
LEDGER_RETRY_BACKOFF_MAX_S = 30
#: Outages worth a retry. The reply streams' Redis gone at publish time leaves a finished
#: job's message in the ledger's outbox; a retry publishes it from there (nothing is sent
#: again), where a failed task would be acknowledged and the message never published.
RETRIED = (LedgerUnavailable, SchemaBehind, redis.ConnectionError, redis.TimeoutError)


def run_jobs(jobs: list[Any]) -> list[str]:
    """Run ``jobs`` concurrently on this process's loop; returns their terminal types."""
    if not isinstance(jobs, list):
        jobs = [jobs]
    ctx = context.current()
    outcomes = ctx.loop.run(ctx.runner.run_chunk(jobs))
    for raw in jobs:
        if isinstance(raw, dict):
            fault_point("after_publish", str(raw.get("id")))
    return outcomes


def register(celery: Celery) -> Task:
    @celery.task(
        name=keys.RUN_JOBS_TASK,
        shared=False,
        bind=True,
        autoretry_for=RETRIED,
        retry_backoff=True,
        retry_backoff_max=LEDGER_RETRY_BACKOFF_MAX_S,
        max_retries=None,
        acks_late=True,
        reject_on_worker_lost=True,
        Strategy="worker.guard:checked_strategy",
    )
    def _run_jobs(self: Task, jobs: list[Any]) -> list[str]:
        return run_jobs(jobs)

    return _run_jobs
