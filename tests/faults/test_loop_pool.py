"""The key at-most-once and no-loss scenarios again, on ``decisions worker``'s default
configuration (the loop pool, ``worker.process.pool``) with one job a Celery message: ``kill -9`` at
every boundary and mid-flight, warm and cold shutdown, a message the broker lost, a broker
restart with messages reserved.

Each reuses its scenario's own test with a fleet whose workers run the loop pool; on it a
fault point's self-kill, or a SIGTERM to the group, is the whole worker (there is no pool
process), so the pool-process scenarios have no counterpart here.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

from shared import keys
from tests.faults import test_broker_lost, test_kill_boundaries, test_servers_restart, test_shutdown
from tests.faults.conftest import FleetFactory
from tests.faults.test_servers_restart import private_redis  # noqa: F401  (a fixture)
from tests.support.checker import Figures
from tests.support.envelopes import raw_envelope, task_body
from tests.support.fleet import Fleet, decide_job, profile, wait_until
from tests.support.ownservers import OwnRedis
from worker.process.faults import FAULT_POINTS

pytestmark = pytest.mark.faults


def _on_loop_pool(new_fleet: FleetFactory) -> FleetFactory:
    """``new_fleet``, its workers on the loop pool (the scenario's other settings kept)."""

    def make(name: str, settings: dict[str, str] | None = None, **kwargs: Any) -> Fleet:
        chosen = dict(settings if settings is not None else profile(3))
        chosen["worker_pool"] = "loop"
        return new_fleet(f"loop-{name}", chosen, **kwargs)

    return make


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_kill_9_at_a_boundary_then_a_new_worker(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], point: str
) -> None:
    test_kill_boundaries.test_kill_9_at_a_boundary_then_a_new_worker(
        _on_loop_pool(new_fleet), report, point, 1
    )


def test_kill_9_while_the_request_is_in_flight(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    test_kill_boundaries.test_kill_9_while_the_request_is_in_flight(
        _on_loop_pool(new_fleet), report
    )


def test_warm_shutdown_lets_requests_in_flight_finish_and_records_them(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    test_shutdown.test_warm_shutdown_lets_requests_in_flight_finish_and_records_them(
        _on_loop_pool(new_fleet), report
    )


def test_cold_shutdown_leaves_requests_in_flight_unknown_and_escalated(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    test_shutdown.test_cold_shutdown_leaves_requests_in_flight_unknown_and_escalated(
        _on_loop_pool(new_fleet), report, (signal.SIGQUIT, False)
    )


def test_ctrl_c_twice_cuts_a_warm_shutdown_short(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    test_shutdown.test_ctrl_c_twice_cuts_a_warm_shutdown_short(_on_loop_pool(new_fleet), report)


def test_a_message_lost_in_the_brpop_window_is_republished_by_the_reaper(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    test_broker_lost.test_a_message_lost_in_the_brpop_window_is_republished_by_the_reaper(
        _on_loop_pool(new_fleet), report
    )


def test_redis_restart_in_the_middle_of_a_batch(
    private_redis: OwnRedis,  # noqa: F811  (first: the fleet's workers stop before it)
    new_fleet: FleetFactory,
    report: Callable[[Figures], Figures],
) -> None:
    test_servers_restart.test_redis_restart_in_the_middle_of_a_batch(
        private_redis, _on_loop_pool(new_fleet), report
    )


@pytest.mark.parametrize(
    "poison", [{"reply_to": 5}, {"id": "loop-acks-\ud800"}], ids=["reply-to-5", "lone-surrogate"]
)
def test_a_job_no_producer_could_record_leaves_the_acknowledgements_going(
    new_fleet: FleetFactory, poison: dict[str, Any]
) -> None:
    """Found by an attack: a job whose ``reply_to`` was 5 (within every limit; a ``Client``
    refuses it, anyone who can write to the broker need not) raised out of the intake's
    forget on the acknowledgement thread, which ended: nothing was acknowledged again, the
    reserve filled, 23 of 30 later jobs were never answered, and a warm shutdown waited for
    the task hard time limit. And a job whose id held a lone surrogate stopped the worker:
    the guard's re-encoding of its refused job raised, which Celery takes for unrecoverable.
    The job is rejected; the jobs after it are answered."""
    crew = _on_loop_pool(new_fleet)("acks", profile(10, max_in_flight="4"))
    worker = crew.start_worker()
    job = {**decide_job("loop-acks-poison", reply_to=crew.stream), **poison}
    crew.broker.lpush(keys.CELERY_QUEUE, json.dumps(raw_envelope(task_body(job))))
    after = crew.submit(crew.jobs(12, "after"))
    crew.expect_replies(crew.pairs(after.job_ids), timeout_s=60)
    wait_until(lambda: crew.broker.hlen("unacked") == 0, 30, "every message acknowledged")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(30) == 0
    assert "Traceback" not in worker.text()
    assert "pool.forget_failed" not in worker.text()  # not even caught: nothing raised
