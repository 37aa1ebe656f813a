"""What one bench run measures, and with which worker settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["BenchConfig"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class BenchConfig:
    #: ``BENCH_REDIS_PORT``: a Redis of one's own (a shared machine's 6379 may be in use).
    redis_port: int = field(default_factory=lambda: int(os.environ.get("BENCH_REDIS_PORT", "6379")))
    redis_db: int = 15
    pg_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    #: Decisions per throughput measurement (after a warm-up).
    decisions_0ms: int = 6000
    decisions_200ms: int = 6000
    warmup: int = 500
    noop_tasks: int = 4000
    producer_jobs: int = 100_000
    #: Jobs per Celery message in the saturated runs: the client's default
    #: (``DECISIONS_CHUNK_SIZE``).
    chunk_size: int = 32
    #: Celery pool of the pipeline's worker process: ``loop``, a default ``decisions worker``
    #: (no pool arguments: ``DECISIONS_MAX_IN_FLIGHT`` decisions in flight), or
    #: ``threads`` (``BENCH_POOL=threads``: chunk_size x pool_threads in flight), the pool
    #: the loop pool replaced. celery-noop always runs on the thread pool.
    pool: str = field(default_factory=lambda: os.environ.get("BENCH_POOL", "loop"))
    #: 16 threads x chunks of 32: 512 in flight, and room for the paced runs' small
    #: messages (each holds a thread for its chunk's provider latency: at 200 ms and one
    #: message per 20 ms tick, about 11 of them).
    pool_threads: int = 16
    #: Seconds of paced load at half the maximum rate, for the added latency; each tick's
    #: jobs go as one message (a producer sending what it has, every tick).
    latency_run_s: float = 4.0
    latency_tick_s: float = 0.02
    #: The RSS run: this many decisions in flight (faux latency long enough to hold them).
    rss_in_flight: int = 1000
    rss_latency_ms: float = 5000.0
    faux_latencies_ms: tuple[float, ...] = (0.0, 200.0)
    #: The fleet stage: this many worker processes (one a core here) on one PostgreSQL.
    fleet_workers: int = 2

    #: The open-loop stage: single-job messages at these rates (a second) for this long,
    #: at these faux latencies, through a default ``decisions worker`` (the loop pool) on
    #: PostgreSQL, and ``direct`` at the same rates with the same in-flight limit. 250/s is
    #: what ``direct`` sustains at 1 s with 256 in flight (its maximum, which issue 18's
    #: target is a share of): offered less, a worker slower than ``direct`` still keeps up
    #: (100/s offered gave 0.96 where the maximum was 0.55 to 0.68 of ``direct``'s).
    open_loop_rates: tuple[float, ...] = (250.0,)
    open_loop_s: float = 10.0
    open_loop_latencies_ms: tuple[float, ...] = (200.0, 1000.0)
    #: DECISIONS_MAX_IN_FLIGHT's default: ``direct``'s limit in the open loop.
    open_loop_in_flight: int = 256
    #: With ``--long``: the same through ``--pool threads`` of this many threads (the pool
    #: the loop pool replaced), for comparison.
    open_loop_threads: int = 0

    @property
    def in_flight(self) -> int:
        """Decisions the pipeline's worker process holds in flight at once (``direct``'s
        concurrency): the in-flight limit, or threads times chunks."""
        if self.pool == "loop":
            return self.open_loop_in_flight
        return self.chunk_size * self.pool_threads

    def long(self) -> BenchConfig:
        """``--long``: the open loop at two rates, for longer, and against a thread pool."""
        return replace(
            self, open_loop_rates=(100.0, 250.0), open_loop_s=30.0, open_loop_threads=200
        )

    def quick(self) -> BenchConfig:
        """A smoke run: the same scenarios, a tenth of the work."""
        return BenchConfig(
            decisions_0ms=600,
            decisions_200ms=1200,
            warmup=100,
            noop_tasks=500,
            producer_jobs=10_000,
            latency_run_s=1.5,
            rss_in_flight=self.rss_in_flight,
            rss_latency_ms=self.rss_latency_ms,
            open_loop_s=3.0,
            pool=self.pool,
        )
