"""The producer's submit rate: validate and publish a 100,000-job batch (no worker runs)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from bench.workload import decide_jobs
from shared import keys
from shared.client import Client

__all__ = ["ProducerRun", "run_producer"]


@dataclass(frozen=True)
class ProducerRun:
    jobs: int
    messages: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.jobs / self.elapsed_s


def run_producer(client: Client, r: redis.Redis, n: int, *, chunk_size: int) -> ProducerRun:
    jobs = decide_jobs("bench-producer", n)
    r.delete(keys.CELERY_QUEUE)
    started = time.perf_counter()
    report = client.submit_batch(jobs, reply_to="bench:producer", chunk_size=chunk_size)
    elapsed = time.perf_counter() - started
    queued = int(r.llen(keys.CELERY_QUEUE))
    r.delete(keys.CELERY_QUEUE)
    if queued != report.messages or len(report.job_ids) != n:
        raise RuntimeError(f"{queued} messages queued, {report.messages} reported for {n} jobs")
    return ProducerRun(n, report.messages, elapsed)
