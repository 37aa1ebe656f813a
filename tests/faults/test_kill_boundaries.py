"""``kill -9`` of a worker (parent and pool) at every boundary of a paid call, then a new
worker: nothing is asked twice, nothing is lost, every unknown call reaches a person.

Each boundary runs with one job per Celery message and with chunks of several jobs (the
jobs of a chunk run concurrently, so a kill catches its neighbours mid-flight too).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.support.chaos import pool_processes
from tests.support.checker import Figures
from tests.support.fleet import wait_until
from worker.process.faults import FAULT_POINTS

pytestmark = pytest.mark.faults

BATCH = 8

#: What the job the fault was aimed at must end as, and how many requests it may have made.
EXPECTED = {
    # Claimed, never sent: the ledger cannot know that, so the call is unknown for good.
    "after_claim": ("escalation:decision_interrupted", 0, "unknown"),
    # Answered but not recorded: paid for and lost; a person decides, it is never re-asked.
    "after_response": ("escalation:decision_interrupted", 1, "unknown"),
    # Recorded with its message (outbox): the next delivery publishes the stored message.
    "after_record": ("result", 1, "answered"),
    # Published, not acknowledged: the redelivery's publish is a no-op.
    "after_publish": ("result", 1, "answered"),
}
CHUNKS = [pytest.param(1, id="one-per-message"), pytest.param(4, id="chunks-of-4")]


@pytest.mark.parametrize("chunk_size", CHUNKS)
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_kill_9_at_a_boundary_then_a_new_worker(
    new_fleet: FleetFactory,
    report: Callable[[Figures], Figures],
    point: str,
    chunk_size: int,
) -> None:
    crew = new_fleet(f"kill-{point}-{chunk_size}")
    jobs = crew.jobs(BATCH)
    target = jobs[2]["id"]
    first = crew.start_worker(fault_point=point, fault_job=target, fault_kill_group="1")
    submitted = crew.submit(jobs, chunk_size=chunk_size)
    assert first.wait_exit(60) == -signal.SIGKILL, first.text()[-2000:]

    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs))

    outcome, requests, state = EXPECTED[point]
    assert figures.outcomes[target] == outcome
    assert figures.requests_by_job[target] == requests
    assert figures.call_states[target] == [state]
    assert figures.lost == 0 and figures.duplicates == 0
    assert figures.jobs == BATCH


def test_kill_9_while_the_request_is_in_flight(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("kill-in-flight")
    jobs = crew.jobs(BATCH)
    target = jobs[0]["id"]
    crew.slow(2000, [target])
    first = crew.start_worker()
    submitted = crew.submit(jobs, chunk_size=1)
    crew.wait_counted([target])  # the faux has read the request; its answer is 2 s away
    first.kill()

    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs))

    assert figures.outcomes[target] == "escalation:decision_interrupted"
    assert figures.requests_by_job[target] == 1
    assert figures.call_states[target] == ["unknown"]
    assert figures.lost == 0 and figures.duplicates == 0


#: Pool process only (the OOM killer's choice): Celery requeues its message at once
#: (``task_reject_on_worker_lost``) and the same worker delivers it again, while the dead
#: delivery's lease still runs. ``after_publish`` is left out: its redelivery would reach
#: the same fault point again and again.
POOL_POINTS = ["after_claim", "after_response", "after_record"]


@pytest.mark.parametrize("point", POOL_POINTS)
def test_kill_9_of_a_pool_process_at_a_boundary(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], point: str
) -> None:
    crew = new_fleet(f"pool-{point}")
    jobs = crew.jobs(4)
    target = jobs[1]["id"]
    worker = crew.start_worker(fault_point=point, fault_job=target)
    submitted = crew.submit(jobs)
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    assert worker.alive()
    # The fleet's reaper may settle the dead claim before the main process logs the loss.
    killed = "exited with 'signal 9 (SIGKILL)'"
    wait_until(lambda: killed in worker.text(), 30, "the pool process's SIGKILL logged")
    figures = report(crew.check(pairs, reap=False))
    outcome, requests, state = EXPECTED[point]
    assert figures.outcomes[target] == outcome
    assert figures.requests_by_job[target] == requests
    assert figures.call_states[target] == [state]
    assert figures.lost == 0 and figures.duplicates == 0


def test_kill_9_of_the_pool_while_requests_are_in_flight(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("pool-in-flight")
    jobs = crew.jobs(4)
    worker, submitted, in_flight = crew.two_in_flight(jobs, 2000)
    pool = pool_processes(worker)
    assert len(pool) == 2
    for pid in pool:
        os.kill(pid, signal.SIGKILL)
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    assert worker.alive()
    figures = report(crew.check(pairs, reap=False))
    for job_id in in_flight:
        assert figures.outcomes[job_id] == "escalation:decision_interrupted"
        assert figures.requests_by_job[job_id] == 1
    assert figures.lost == 0 and figures.duplicates == 0
