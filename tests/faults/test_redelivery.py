"""The broker delivers a message again while its first delivery still runs.

Twice on purpose (the same Celery message published twice, as a producer retrying a publish
whose confirmation it lost would), and for real: a worker with a short visibility timeout
sweeps the unacknowledged message of a slow job back onto the queue while the worker that
has it is still waiting for the provider. Either way the second delivery finds the call
claimed under a live lease, sends nothing, and publishes the first delivery's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shared import keys
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import Fleet, profile, wait_until

pytestmark = pytest.mark.faults


def _deliver_twice(
    crew: Fleet, workers: int, jobs: list[dict[str, Any]]
) -> tuple[str, Callable[[], str]]:
    """``jobs`` as one Celery message published twice under one task id, with ``workers``
    workers (one worker: two pool processes) running; waits until both deliveries
    succeeded. The task id, and the workers' logs."""
    concurrency = "2" if workers == 1 else "1"
    running = [crew.start_worker(worker_concurrency=concurrency) for _ in range(workers)]
    client = crew.client()
    bodies = [
        client.validate(j, reply_to=crew.stream).model_dump(mode="json", exclude_none=True)
        for j in jobs
    ]
    task_id = str(uuid.uuid4())
    for _ in range(2):
        client.celery.send_task(
            keys.RUN_JOBS_TASK, kwargs={"jobs": bodies}, queue=keys.CELERY_QUEUE, task_id=task_id
        )
    crew.expect_replies(crew.pairs([j["id"] for j in jobs]), timeout_s=30)

    def logs() -> str:
        return "".join(w.text() for w in running)

    # Both deliveries ran to their end: the second waited out the first, sent nothing.
    wait_until(lambda: logs().count(f"[{task_id}] succeeded") >= 2, 30, "two deliveries")
    return task_id, logs


@pytest.mark.parametrize("workers", [1, 2], ids=["two-pool-processes", "two-workers"])
def test_the_same_message_delivered_twice_at_once(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], workers: int
) -> None:
    crew = new_fleet(f"twice-{workers}")
    [job] = crew.jobs(1)
    crew.slow(1500, [job["id"]])
    task_id, logs = _deliver_twice(crew, workers, [job])
    assert logs().count(f"[{task_id}] received") == 2
    figures = report(crew.check(crew.pairs([job["id"]])))
    assert figures.requests_by_job[job["id"]] == 1
    assert figures.outcomes[job["id"]] == "result"
    assert len(crew.entries()) == 1  # not even a raw duplicate: publish-once held


def test_a_short_visibility_timeout_redelivers_a_running_job(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    # The worker holding the job allows long deadlines; the other sweeps after 14 s.
    crew = new_fleet("visibility", profile(30, worker_concurrency="1"))
    sweeper = profile(5, worker_concurrency="1")
    [job] = crew.jobs(1, timeout_s=25)
    crew.slow(17_000, [job["id"]])
    holder = crew.start_worker()
    submitted = crew.submit([job])
    crew.wait_counted([job["id"]])
    other = crew.start_worker(**sweeper)
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    assert holder.alive()
    assert "decisions.run_jobs" in other.text() and " received" in other.text(), (
        "the sweeping worker never got the redelivered message:\n" + other.text()[-2000:]
    )
    figures = report(crew.check(pairs))
    assert figures.requests_by_job[job["id"]] == 1
    assert figures.outcomes[job["id"]] == "result"
    assert len(crew.entries()) == 1


@pytest.mark.parametrize("workers", [1, 2], ids=["two-pool-processes", "two-workers"])
def test_a_packed_message_delivered_twice_at_once(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], workers: int
) -> None:
    # Six jobs of one state share one request (shared.packs); the second delivery finds
    # their calls claimed by the first: claim_pack takes none, each job waits out the live
    # claim and publishes the first delivery's message.
    crew = new_fleet(f"pack-twice-{workers}")
    jobs = [{**j, "state": "One shared policy.", "pack": True} for j in crew.jobs(6, "packed")]
    crew.slow(1500)
    _, logs = _deliver_twice(crew, workers, jobs)
    assert "pack.taken" in logs()  # the second delivery met the first one's claims
    figures = report(crew.check(crew.pairs([j["id"] for j in jobs])))
    assert figures.requests == 1  # one request for six jobs, though the message came twice
    assert set(figures.outcomes.values()) == {"result"}
    assert len(crew.entries()) == len(jobs)  # publish-once held for every member
