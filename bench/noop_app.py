"""``celery-noop``: the worker's own Celery app and settings with one more task, which does
nothing (``celery -A bench.noop_app worker``)."""

from __future__ import annotations

from worker.app import create_app

__all__ = ["NOOP_QUEUE", "NOOP_TASK", "app"]

NOOP_QUEUE = "bench-noop"
NOOP_TASK = "bench.noop"

app = create_app()


@app.task(name=NOOP_TASK, shared=False, acks_late=True, reject_on_worker_lost=True)
def noop(n: int) -> None:
    return None
