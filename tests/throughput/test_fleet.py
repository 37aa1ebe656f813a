"""Chunked execution on a real fleet: at most once and nothing lost with chunks of 32 exactly
as with one job a message, and two workers that keep under a provider's rate limit.

Each test has its own faux server (it changes its behaviour and rate limit), Redis database
13 and PostgreSQL schema.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.fleet import Fleet, fleet, profile
from tests.support.processes import faux_server
from tests.support.services import postgres_schema, redis_database, redis_url
from tests.throughput.support import REDIS_DB

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture
def crew_parts(tmp_path: Path) -> Iterator[tuple[str, str, str, Path]]:
    with (
        redis_database(REDIS_DB),
        postgres_schema("throughput") as ledger_url,
        faux_server(log=tmp_path / "faux.log") as faux_url,
    ):
        yield redis_url(REDIS_DB), ledger_url, faux_url, tmp_path


def make_fleet(
    parts: tuple[str, str, str, Path], name: str, settings: dict[str, str]
) -> AbstractContextManager[Fleet]:
    broker, ledger_url, faux_url, logs = parts
    return fleet(
        name,
        r=redis.Redis.from_url(broker),
        broker_url=broker,
        ledger_url=ledger_url,
        faux_url=faux_url,
        logs=logs,
        settings=settings,
    )


@pytest.mark.parametrize("chunk_size", [1, 32], ids=["one-per-message", "chunks-of-32"])
def test_kill_9_with_many_in_flight_and_a_duplicate_batch(
    crew_parts: tuple[str, str, str, Path], chunk_size: int
) -> None:
    # A ceiling long enough that the duplicate batch meets live deadlines after the restart.
    with make_fleet(crew_parts, f"chunks-{chunk_size}", profile(20)) as crew:
        jobs = crew.jobs(96)
        crew.slow(300)
        first = crew.start_worker()
        submitted = crew.submit(jobs, chunk_size=chunk_size)
        crew.wait_counted([j["id"] for j in jobs[:2]])
        first.kill()  # kill -9 with requests in flight: their outcome is unknown for good
        assert first.wait_exit(30) == -signal.SIGKILL
        # The same batch again while the first delivery's rows are half written.
        again = crew.submit(jobs, chunk_size=chunk_size)
        assert again.job_ids == submitted.job_ids
        for worker in [crew.start_worker(wait=False), crew.start_worker(wait=False)]:
            worker.wait_ready()
        pairs = crew.pairs(submitted.job_ids)
        crew.wait_for(pairs, timeout_s=90)
        figures = crew.check(pairs)  # reaps once if a job is still without its message
        print(f"chunk size {chunk_size}: {figures.line()}")

    assert figures.jobs == 96
    assert figures.lost == 0 and figures.duplicates == 0
    assert max(figures.requests_by_job.values()) <= 1  # no request was ever sent twice
    interrupted = figures.escalated.get("decision_interrupted", 0)
    assert interrupted >= 1  # the kill did catch requests in flight...
    assert interrupted == figures.unknown_calls  # ...and each unknown call reached a person
    assert figures.results >= 1


def test_two_workers_stay_under_the_providers_rate_limit(
    crew_parts: tuple[str, str, str, Path],
) -> None:
    faux_url = crew_parts[2]
    limits = json.dumps({"faux": {"per_second": 30}})
    with make_fleet(crew_parts, "limited", profile(60, provider_limits=limits)) as crew:
        crew.start_worker()
        crew.start_worker()
        # The provider allows 50 a second; the fleet is configured for 30.
        httpx.put(f"{faux_url}/_faux/rate-limit", json={"per_second": 50}).raise_for_status()
        submitted = crew.submit(crew.jobs(240), chunk_size=16)
        pairs = crew.pairs(submitted.job_ids)
        assert crew.wait_for(pairs, timeout_s=120) == set()
        seen = httpx.get(f"{faux_url}/_faux/rate-limit").json()
        print(f"the faux under its 50/s limit: {seen}")
        figures = crew.check(pairs, reap=False)

    assert figures.results == 240 and figures.lost == 0
    assert seen["admitted"] == 240
    # A handful at most: requests reach the provider with some jitter after their slot, which
    # can crowd a few more into one of its windows. (Without the fleet's limit the same run
    # met hundreds of 429s and escalated 50 of the 240 jobs as rate limited.)
    assert seen["rejected"] <= 10, seen
