"""The one task a producer may name: run a chunk of jobs (JSON objects) to their replies.

A job's path from here: task ─▶ dispatch (``worker.kinds.dispatch.Runner.run_chunk``) ─▶
its kind (``worker.kinds.decide``, ``worker.kinds.packs``, ``worker.kinds.judgments``,
``worker.kinds.menus``) ─▶ the delivery protocol (``worker.delivery``) ─▶ ledger and
provider ─▶ outbox ─▶ reply stream.
"""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery, Task, signals
from celery.exceptions import Reject

from shared import keys
from shared.errors import NotAdmitted, SchemaBehind
from worker.ledger import LedgerUnavailable
from worker.observability import tracing
from worker.process import context
from worker.process.faults import fault_point
from worker.process.guard import use_strict_json
from worker.recovery.intake import forget_ran

__all__ = ["RETRIED", "after_run", "register", "run_jobs"]

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
    after_run(ctx, jobs)
    return outcomes


def after_run(ctx: context.WorkerContext, jobs: list[Any]) -> None:
    """Every job of a message ran to its published terminal message; its acknowledgement is
    next (the task's return, or ``worker.process.pool``'s callback)."""
    forget_ran(ctx.intake, jobs)  # the broker can no longer lose them: they ran
    for raw in jobs:
        if isinstance(raw, dict):
            fault_point("after_publish", str(raw.get("id")))


@signals.worker_process_shutdown.connect
def _flush_traces(**_: Any) -> None:
    # A pool process leaves through os._exit, past the tracing SDK's atexit hook.
    tracing.flush()


def register(celery: Celery) -> Task:
    # Before any pool process is forked: the main process and the pool decode bodies alike.
    use_strict_json()

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
        Strategy="worker.process.guard:checked_strategy",
    )
    def _run_jobs(self: Task, jobs: list[Any]) -> list[str]:
        # The producer's trace, from the message headers, continues here (a no-op untraced).
        with tracing.continued(self.request), tracing.span(
            tracing.TASK_SPAN, kind="consumer", **{"messaging.system": "celery"}
        ):
            try:
                return run_jobs(jobs)
            except NotAdmitted:
                # A stopping worker's loop pool started none of some jobs: the message goes
                # back to the queue (the jobs that ran replay from the ledger).
                raise Reject("the worker is stopping", requeue=True) from None

    return _run_jobs
