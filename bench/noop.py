"""``celery-noop``: no-op tasks, one a message, through a worker with the pipeline's settings."""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass

import redis
from celery import Celery

from bench.noop_app import NOOP_QUEUE, NOOP_TASK

__all__ = ["NoopRun", "run_noop"]

#: kombu's Redis transport keeps delivered, unacknowledged messages here.
_UNACKED_INDEX = "unacked_index"


@dataclass(frozen=True)
class NoopRun:
    tasks: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.tasks / self.elapsed_s


def _drained(r: redis.Redis) -> bool:
    return int(r.llen(NOOP_QUEUE)) == 0 and int(r.zcard(_UNACKED_INDEX)) == 0


def _send(celery: Celery, n: int) -> None:
    with celery.producer_or_acquire() as producer:
        for i in range(n):
            celery.send_task(NOOP_TASK, args=[i], queue=NOOP_QUEUE, producer=producer)


def _run(celery: Celery, r: redis.Redis, count: int, timeout_s: float) -> float:
    """Send ``count`` tasks and wait until the worker took and acknowledged them all (s)."""
    started = time.perf_counter()
    _send(celery, count)
    until = time.monotonic() + timeout_s
    while not _drained(r):
        if time.monotonic() > until:
            raise TimeoutError(f"celery-noop: {r.llen(NOOP_QUEUE)} tasks still queued")
        time.sleep(0.005)
    return time.perf_counter() - started


def run_noop(
    celery: Celery,
    r: redis.Redis,
    n: int,
    *,
    warmup: int,
    timeout_s: float = 300,
    meter: AbstractContextManager[object] | None = None,
) -> NoopRun:
    """``n`` tasks after ``warmup`` of them; ``meter`` (the worker's CPU) is entered for the
    ``n`` only."""
    _run(celery, r, warmup, timeout_s)
    with meter or contextlib.nullcontext():
        elapsed = _run(celery, r, n, timeout_s)
    return NoopRun(n, elapsed)
