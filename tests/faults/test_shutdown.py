"""Shutting a worker down with requests in flight.

Warm (SIGTERM to the worker): it stops taking messages, lets the requests in flight finish,
records and publishes them, and exits 0. Cold (SIGQUIT to the worker, or a SIGTERM that
reaches the pool processes too, as a process-group or cgroup kill does): the requests in
flight are cut off; their calls stay claimed, and the next delivery books them ``unknown``
and escalates them ``decision_interrupted``, never sending them again.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import profile

pytestmark = pytest.mark.faults


def test_warm_shutdown_lets_requests_in_flight_finish_and_records_them(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("warm", profile(10))
    jobs = crew.jobs(6)
    in_flight = [j["id"] for j in jobs[:2]]
    crew.slow(1500, in_flight)
    first = crew.start_worker(worker_concurrency="2")
    submitted = crew.submit(jobs)
    crew.wait_counted(in_flight)
    first.signal(signal.SIGTERM)
    assert first.wait_exit(30) == 0, first.text()[-2000:]
    # Finished, recorded and published before the worker exited.
    crew.expect_replies(crew.pairs(in_flight), timeout_s=0)
    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs))
    for job_id in in_flight:
        assert figures.outcomes[job_id] == "result"
        assert figures.call_states[job_id] == ["answered"]
        assert figures.requests_by_job[job_id] == 1
    assert figures.lost == 0 and figures.duplicates == 0 and figures.unknown_calls == 0


@pytest.mark.parametrize(
    "how",
    [
        pytest.param((signal.SIGQUIT, False), id="sigquit"),
        pytest.param((signal.SIGTERM, True), id="sigterm-to-the-group"),
    ],
)
def test_cold_shutdown_leaves_requests_in_flight_unknown_and_escalated(
    new_fleet: FleetFactory,
    report: Callable[[Figures], Figures],
    how: tuple[int, bool],
) -> None:
    sig, group = how
    crew = new_fleet(f"cold-{sig}-{group}")
    jobs = crew.jobs(6)
    in_flight = [j["id"] for j in jobs[:2]]
    crew.slow(2000, in_flight)
    first = crew.start_worker(worker_concurrency="2")
    submitted = crew.submit(jobs)
    crew.wait_counted(in_flight)
    first.signal(sig, group=group)
    first.wait_exit(30)
    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs))
    for job_id in in_flight:
        assert figures.outcomes[job_id] == "escalation:decision_interrupted"
        assert figures.call_states[job_id] == ["unknown"]
        assert figures.requests_by_job[job_id] == 1
    assert figures.lost == 0 and figures.duplicates == 0
