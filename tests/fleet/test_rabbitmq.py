"""RabbitMQ as the broker, Redis for the reply and escalation streams.

RabbitMQ acknowledges for real: a message whose consumer's connection drops (the worker was
killed) is requeued at once and delivered to the next worker, without any visibility
timeout. The ledger's guarantees must not depend on how the broker redelivers: the fault
suite's core scenarios run here again, checked by the same checker.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import kombu
import pytest

from tests.fleet.rabbitmq import RabbitFleet, rabbitmq_vhost
from tests.fleet.support import flushed
from tests.support.checker import Figures
from tests.support.fleet import profile
from tests.support.ownservers import OwnRedis
from tests.support.processes import DECISIONS, faux_server
from tests.support.services import postgres_schema
from worker.ledger import Ledger
from worker.process.faults import FAULT_POINTS

pytestmark = pytest.mark.integration

BATCH = 6

#: As in tests/faults: what the targeted job ends as, its requests, its call's state.
EXPECTED = {
    "after_claim": ("escalation:decision_interrupted", 0, "unknown"),
    "after_response": ("escalation:decision_interrupted", 1, "unknown"),
    "after_record": ("result", 1, "answered"),
    "after_publish": ("result", 1, "answered"),
}


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    with rabbitmq_vhost("decisions-fleet") as url:
        yield url


@pytest.fixture(scope="module")
def faux_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with faux_server(log=tmp_path_factory.mktemp("faux") / "faux.log") as url:
        yield url


@pytest.fixture
def crew(
    request: pytest.FixtureRequest,
    vhost: str,
    faux_url: str,
    tmp_path: Path,
    redis_server: OwnRedis,
) -> Iterator[RabbitFleet]:
    _purge(vhost)
    with flushed(redis_server) as (r, url), postgres_schema("rabbit") as ledger_url:
        with Ledger(ledger_url) as ledger:
            ledger.migrate()
        httpx.put(f"{faux_url}/_faux/behaviour", content="{}", timeout=10).raise_for_status()
        fleet = RabbitFleet(
            name=request.node.name.replace("[", "-").replace("]", ""),
            broker_url=vhost,
            ledger_url=ledger_url,
            faux_url=faux_url,
            logs=tmp_path,
            settings=profile(3),
            r=r,
            redis_url=url,
        )
        try:
            yield fleet
        finally:
            fleet.close()
            httpx.put(f"{faux_url}/_faux/behaviour", content="{}", timeout=10)


def _purge(broker_url: str) -> None:
    with kombu.Connection(broker_url) as conn:
        channel = conn.channel()
        try:
            channel.queue_purge("decisions")
        except conn.channel_errors:
            pass  # no queue yet
        finally:
            channel.close()


@pytest.fixture
def report() -> Callable[[Figures], Figures]:
    def add(figures: Figures) -> Figures:
        print(figures.line())
        return figures

    return add


def test_a_batch_runs_through_rabbitmq(crew: RabbitFleet, report: Callable[..., Figures]) -> None:
    crew.start_worker()
    jobs = crew.jobs(24)
    submitted = crew.submit(jobs, chunk_size=4)
    pairs = crew.pairs(submitted.job_ids)
    assert crew.wait_for(pairs, timeout_s=60) == set()
    figures = report(crew.check(pairs, reap=False))
    assert figures.results == 24 and figures.requests == 24
    assert figures.duplicates == 0 and figures.lost == 0

    status = subprocess.run(
        [DECISIONS, "status", "--json", "--timeout", "2"],
        env=crew.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    fleet = json.loads(status.stdout)
    # RabbitMQ's own counts: nothing waiting, our one worker consuming.
    assert fleet["queue"] == {"queue": "decisions", "ready": 0, "unacked": None, "consumers": 1}
    assert len(fleet["workers"]) == 1
    assert fleet["ledger"]["in_flight"] == 0


@pytest.mark.faults
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_kill_9_at_a_boundary_then_rabbitmq_redelivers(
    crew: RabbitFleet, report: Callable[..., Figures], point: str
) -> None:
    jobs = crew.jobs(BATCH)
    target = jobs[2]["id"]
    first = crew.start_worker(fault_point=point, fault_job=target, fault_kill_group="1")
    submitted = crew.submit(jobs, chunk_size=1)
    assert first.wait_exit(60) == -signal.SIGKILL, first.text()[-2000:]

    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.wait_for(pairs, timeout_s=60)
    figures = report(crew.check(pairs))

    outcome, requests, state = EXPECTED[point]
    assert figures.outcomes[target] == outcome
    assert figures.requests_by_job[target] == requests
    assert figures.call_states[target] == [state]
    assert figures.lost == 0 and figures.duplicates == 0
    assert figures.jobs == BATCH
    # RabbitMQ gave the message back at once: the second worker settled it, no reaper needed.
    assert figures.reaped == 0


@pytest.mark.faults
def test_kill_9_in_flight_then_rabbitmq_redelivers(
    crew: RabbitFleet, report: Callable[..., Figures]
) -> None:
    jobs = crew.jobs(BATCH)
    target = jobs[0]["id"]
    crew.slow(2000, [target])
    first = crew.start_worker()
    submitted = crew.submit(jobs, chunk_size=1)
    crew.wait_counted([target])  # the faux has read the request; its answer is 2 s away
    first.kill()

    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.wait_for(pairs, timeout_s=60)
    figures = report(crew.check(pairs))

    assert figures.outcomes[target] == "escalation:decision_interrupted"
    assert figures.requests_by_job[target] == 1
    assert figures.call_states[target] == ["unknown"]
    assert figures.lost == 0 and figures.duplicates == 0
    assert figures.reaped == 0
