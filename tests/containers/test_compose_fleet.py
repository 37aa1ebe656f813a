"""The compose fleet through its containers: deploy/Dockerfile built as users build it,
docker-compose.yml brought up by podman-compose (with deploy/ci/compose.override.yml for the
images no registry can give here), and a batch from the host through a worker stopped, a
worker killed and Redis restarted.

The promise checked (tests/support/checker.py): every job exactly one terminal message, each
request at the faux at most once, nothing lost; and ``docker stop`` (here ``podman stop``,
SIGTERM to the image's PID 1) is a warm shutdown: the calls in flight finish.
"""

from __future__ import annotations

import time

import httpx
import pytest
import redis
import yaml

from shared import keys
from tests.containers.conftest import CEILING_S
from tests.containers.podman import ROOT, ComposeFleet, podman
from tests.support.fleet import Fleet, profile, wait_until
from worker.observability.metrics import ledger_gauges

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1200)]


def in_flight_in(fleet: ComposeFleet, container: str) -> float:
    """The worker's own count of requests in flight, read from its metrics endpoint."""
    text = podman(
        "exec",
        container,
        "python",
        "-c",
        "import urllib.request; "
        "print(urllib.request.urlopen('http://127.0.0.1:9464/metrics', timeout=5).read().decode())",
    )
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("decisions_requests_in_flight{")
    )


def wait_redis(r: redis.Redis, timeout_s: float = 60) -> None:
    def answers() -> bool:
        try:
            return bool(r.ping())
        except redis.ConnectionError:
            return False

    wait_until(answers, timeout_s, "Redis answering after its restart")


def test_the_override_runs_the_workers_with_the_test_profile() -> None:
    override = yaml.safe_load((ROOT / "deploy" / "ci" / "compose.override.yml").read_text())
    env = override["services"]["worker"]["environment"]
    expected = profile(CEILING_S)
    assert env == {
        f"DECISIONS_{name.upper()}": value
        for name, value in expected.items()
        if name not in ("worker_concurrency", "log_level")
    }


def test_docker_stop_is_a_warm_shutdown(compose_fleet: ComposeFleet, crew: Fleet) -> None:
    first = compose_fleet.container("worker", 1)
    crew.slow(3000)
    jobs = crew.jobs(4, "stop")  # two workers, two pool processes each: all in flight at once
    crew.submit(jobs)
    ledger = crew.ledger()
    try:
        wait_until(lambda: in_flight_in(compose_fleet, first) >= 1, 60, f"a call in {first}")
        claimed_at_stop = {
            job["id"]
            for job in jobs
            if (call := ledger.get_call(job["id"], "decide")) and call.status == "claimed"
        }
        started = time.monotonic()
        # SIGTERM to PID 1 (`decisions`, exec form), SIGKILL only after 120 s.
        podman("stop", "--time=120", first, timeout=180)
        took = time.monotonic() - started
        status, code = compose_fleet.state(first)
        assert (status, code) == ("exited", 0), (
            f"{first} did not stop by itself ({status}, {code}) after {took:.1f} s:\n"
            + compose_fleet.logs([first], lines=40)
        )
        crew.slow(0)
        pairs = crew.pairs(job["id"] for job in jobs)
        crew.expect_replies(pairs, timeout_s=120)
        figures = crew.check(pairs, reap=False)
    except (AssertionError, TimeoutError) as exc:
        raise AssertionError(f"{exc}\n{compose_fleet.logs(lines=30)}") from exc
    finally:
        ledger.dispose()
        podman("start", first, check=False)
    print(f"stopped in {took:.1f} s; {figures.line()}")
    # Every call in flight when SIGTERM came was answered, none left unknown: warm.
    assert figures.unknown_calls == 0, figures.line()
    assert "decision_interrupted" not in figures.escalated, figures.line()
    for job_id in claimed_at_stop:
        assert figures.outcomes[job_id] == "result", (job_id, figures.outcomes[job_id])
    assert all(n <= 1 for n in figures.requests_by_job.values()), figures.requests_by_job
    compose_fleet.wait_healthy([first])


def test_a_killed_worker_and_a_restarted_redis_lose_and_repeat_nothing(
    compose_fleet: ComposeFleet, crew: Fleet
) -> None:
    second = compose_fleet.container("worker", 2)
    redis_container = compose_fleet.container("redis")
    crew.slow(1500)
    jobs = crew.jobs(12, "chaos")
    crew.submit(jobs)
    pairs = crew.pairs(job["id"] for job in jobs)
    ledger = crew.ledger()
    try:
        wait_until(lambda: in_flight_in(compose_fleet, second) >= 1, 60, f"a call in {second}")
        podman("kill", second)  # SIGKILL: calls in flight are cut off mid-request
        assert podman("wait", second).strip() == "137"
        podman("start", second)
        # Redis restarted with jobs still queued: the AOF brings them back.
        queued = crew.broker.llen(keys.CELERY_QUEUE)
        assert queued > 0, "the batch finished before Redis was restarted"
        before = podman("inspect", "--format", "{{.State.StartedAt}}", redis_container)
        podman("restart", "--time=10", redis_container, timeout=120)
        assert podman("inspect", "--format", "{{.State.StartedAt}}", redis_container) != before
        wait_redis(crew.r)
        assert crew.r.info("persistence")["aof_enabled"] == 1
        crew.slow(0)
        crew.expect_replies(pairs, timeout_s=180)
        figures = crew.check(pairs)
    except (AssertionError, TimeoutError) as exc:
        raise AssertionError(f"{exc}\n{compose_fleet.logs(lines=30)}") from exc
    finally:
        ledger.dispose()
    # check() raised on any broken promise; the figures say what the faults came to.
    print(figures.line())
    assert figures.lost == 0 and figures.duplicates == 0
    counts = crew.calls()
    sent = {key: n for key, n in counts.items() if key.rpartition("/")[0] in dict(pairs)}
    assert sent and max(sent.values()) == 1, sent  # each request at the faux at most once
    with crew.ledger() as after:
        assert ledger_gauges(after).calls_by_status.get("claimed", 0) == 0


def test_the_console_answers_and_every_health_check_passes(
    compose_fleet: ComposeFleet,
) -> None:
    console = compose_fleet.url("console")
    answer = httpx.get(f"{console}/healthz", timeout=10)
    assert (answer.status_code, answer.text) == (200, "ok")
    login = httpx.get(f"{console}/login", timeout=10)
    assert login.status_code == 200 and "<form" in login.text
    services = ["redis", "postgres", "faux", "console"]
    containers = [compose_fleet.container(s) for s in services]
    containers += [compose_fleet.container("worker", n) for n in (1, 2)]
    compose_fleet.wait_healthy(containers, timeout_s=120)
    assert compose_fleet.state(compose_fleet.container("migrate")) == ("exited", 0)
