"""Soak: a few thousand jobs stream in while a chaos loop kills workers every few seconds.

Run with ``make soak`` (``pytest -m soak -s``); not part of ``make test``. Sizes can be
changed with ``SOAK_JOBS``, ``SOAK_RATE`` (jobs/s) and ``SOAK_SEED`` (the chaos loop's).
Runs twice: the prefork pool with jobs in chunks, and the loop pool (``decisions worker``'s
default) with one job a message. A third of the strikes ask a worker to stop (SIGTERM,
SIGQUIT, Ctrl+C twice) rather than kill it; one still there 30 s later fails the run.
Prints the checker's figures: jobs, requests, duplicates (must be 0), lost (must be 0),
escalated by reason, broker_lost (jobs whose message kombu's Redis transport dropped with a
killed consumer before any worker opened them, republished by the workers' reapers from the
producer's intake records, ``worker.recovery.intake``: nothing here resubmits), and what the chaos
loop did.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.support.chaos import Chaos
from tests.support.checker import Figures
from tests.support.fleet import profile
from worker.process.liveness import EXIT_CODE

pytestmark = pytest.mark.soak

JOBS = int(os.environ.get("SOAK_JOBS", "3000"))
RATE = float(os.environ.get("SOAK_RATE", "40"))
SEED = int(os.environ["SOAK_SEED"]) if "SOAK_SEED" in os.environ else None


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("pool", "chunk"),
    [
        # The classic pool, jobs in chunks: kills of the worker and of its pool processes.
        pytest.param("prefork", 8, id="prefork-chunks"),
        # ``decisions worker``'s default pool, one job a message as most producers send.
        pytest.param("loop", 1, id="loop-single-jobs"),
    ],
)
def test_soak_with_workers_killed_every_few_seconds(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], pool: str, chunk: int
) -> None:
    settings = profile(15, margin_s=1, worker_concurrency="2", worker_pool=pool)
    crew = new_fleet(f"soak-{pool}", settings)
    crew.slow(400)  # every request takes 400 ms at the provider: kills catch many in flight
    # A third of the strikes ask the worker to stop instead (SIGTERM, SIGQUIT, Ctrl+C twice).
    chaos = Chaos(crew, size=3, every_s=(2.0, 5.0), stop_share=0.33, seed=SEED)
    chaos.top_up()
    for worker in crew.workers:
        worker.wait_ready()
    jobs = crew.jobs(JOBS)
    submitted: list[str] = []

    def produce() -> None:
        started = time.monotonic()
        for i in range(0, len(jobs), chunk):
            sent = crew.submit(jobs[i : i + chunk], chunk_size=chunk)
            submitted.extend(sent.job_ids)
            # A steady stream: queueing stays short of the deadlines.
            time.sleep(max(0.0, started + (i + chunk) / RATE - time.monotonic()))

    started = time.monotonic()
    producer = threading.Thread(target=produce, name="producer")
    producer.start()
    chaos.start()
    producer.join()
    chaos.stop()  # and back to full size
    produced_s = time.monotonic() - started
    pairs = crew.pairs(submitted)
    # Messages of the last killed workers come back after the visibility timeout; those the
    # broker lost are republished by a reaper about as soon after.
    missing = crew.wait_for(pairs, timeout_s=float(settings["visibility_timeout_s"]) + 90)
    if missing:
        print(f"soak: no reply yet for {len(missing)}: {crew.where_are(missing)}; "
              f"broker {crew.broker_state()}")
    figures = report(crew.check(pairs))
    print(
        f"soak: {len(submitted)} jobs in {produced_s:.0f} s of chaos (seed {chaos.seed}): "
        f"{chaos.figures.group_kills} worker kills, {chaos.figures.pool_kills} pool-process "
        f"kills, {chaos.figures.stops} stops asked ({chaos.figures.hung} hung), "
        f"{chaos.figures.starts} starts; {len(missing)} still silent after the wait; "
        f"{figures.line()}"
    )
    assert len(submitted) == JOBS
    assert figures.jobs == JOBS
    assert figures.duplicates == 0
    assert figures.lost == 0
    # What the reapers republished were jobs of this run (and every one of them replied).
    assert set(figures.broker_lost_ids) <= set(submitted)
    print("soak: the chaos loop did:\n  " + "\n  ".join(chaos.figures.log))
    figures_chaos = chaos.figures
    # Every stop asked ended as that stop, not as a worker whose loop died (exit 70).
    assert not [line for line in figures_chaos.log if line.endswith(f"exit {EXIT_CODE}")]
    assert figures_chaos.hung == 0, [line for line in figures_chaos.log if "still there" in line]
    assert figures_chaos.group_kills + figures_chaos.pool_kills + figures_chaos.stops >= 5
