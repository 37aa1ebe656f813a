"""Shutting a worker down with requests in flight.

Warm (SIGTERM to the worker): it stops taking messages, lets the requests in flight finish,
records and publishes them, and exits 0. Cold (SIGQUIT to the worker, or a SIGTERM that
reaches the pool processes too, as a process-group or cgroup kill does, or Ctrl+C twice):
the requests in flight are cut off; their calls stay claimed, and the next delivery books
them ``unknown`` and escalates them ``decision_interrupted``, never sending them again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import Fleet, Worker, profile
from worker.process import liveness

pytestmark = pytest.mark.faults


def _ended_as_asked(worker: Worker, timeout_s: float) -> None:
    """The worker exits within ``timeout_s`` by the shutdown it was asked for, not as a
    worker whose loop died (``worker.process.liveness``: a CRITICAL line and exit 70 that
    page someone; the loop pool ended a cold shutdown so until it stopped waiting in
    Celery's signal handler)."""
    code = worker.wait_exit(timeout_s)
    assert code != liveness.EXIT_CODE and "worker.vital_part_died" not in worker.text(), (
        worker.text()[-2000:]
    )


def _cut_off_and_escalated(
    crew: Fleet,
    job_ids: list[str],
    in_flight: list[str],
    report: Callable[[Figures], Figures],
) -> None:
    """A new worker answers every job; those whose requests were cut off are booked
    ``unknown`` and escalated, never sent again, and nothing is lost or doubled."""
    crew.start_worker()
    pairs = crew.pairs(job_ids)
    crew.expect_replies(pairs, timeout_s=90)
    figures = report(crew.check(pairs))
    for job_id in in_flight:
        assert figures.outcomes[job_id] == "escalation:decision_interrupted"
        assert figures.call_states[job_id] == ["unknown"]
        assert figures.requests_by_job[job_id] == 1
    assert figures.lost == 0 and figures.duplicates == 0


def test_warm_shutdown_lets_requests_in_flight_finish_and_records_them(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("warm", profile(10))
    jobs = crew.jobs(6)
    first, submitted, in_flight = crew.two_in_flight(jobs, 1500)
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
    first, submitted, in_flight = crew.two_in_flight(jobs, 2000)
    first.signal(sig, group=group)
    _ended_as_asked(first, 30)
    _cut_off_and_escalated(crew, submitted.job_ids, in_flight, report)


def test_ctrl_c_twice_cuts_a_warm_shutdown_short(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    """An operator's Ctrl+C, then another while the requests in flight are awaited: the
    second is Celery's cold shutdown, and the worker exits without waiting for them."""
    crew = new_fleet("ctrl-c-twice", profile(30))
    jobs = crew.jobs(4)
    first, submitted, in_flight = crew.two_in_flight(jobs, 25_000)
    first.signal(signal.SIGINT)
    time.sleep(1)  # the warm shutdown is waiting for the two requests in flight
    assert first.alive()
    first.signal(signal.SIGINT)
    _ended_as_asked(first, 15)
    _cut_off_and_escalated(crew, submitted.job_ids, in_flight, report)
