"""Fixtures of the fault suite: one faux server per session, a fleet per test.

The broker and reply streams live on a private ``redis-server`` started for the session
(database 12, flushed before and after each test), not on the shared Redis: the Celery queue
name is fixed, so two runs of this suite at once (two engineers' ``make test``) on one shared
database would run each other's jobs and flush each other's queues. Each test has its own
PostgreSQL schema on the shared server; scenarios that restart a server start their own.
The figures every scenario reports are printed at the end of the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.checker import Figures
from tests.support.fleet import Fleet, fleet, profile
from tests.support.ownservers import OwnRedis, own_redis
from tests.support.processes import faux_server
from tests.support.services import postgres_schema

REDIS_DB = 12

_FIGURES: list[str] = []

FleetFactory = Callable[..., Fleet]


@pytest.fixture(scope="session")
def faux_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("faux")
    with faux_server(log=logs / "faux.log") as url:
        yield url


@pytest.fixture(scope="session")
def session_redis() -> Iterator[OwnRedis]:
    with own_redis() as server:
        yield server


@pytest.fixture
def broker(session_redis: OwnRedis) -> Iterator[redis.Redis]:
    """Database 12 of the session's redis-server, empty before and after the test."""
    client = redis.Redis.from_url(session_redis.url(REDIS_DB))
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def new_fleet(
    tmp_path: Path, faux_url: str, session_redis: OwnRedis, broker: redis.Redis
) -> Iterator[FleetFactory]:
    """Make a fleet: the session's Redis and a fresh schema unless a test brings its own."""
    with ExitStack() as stack:

        def make(
            name: str,
            settings: dict[str, str] | None = None,
            *,
            broker_url: str | None = None,
            ledger_url: str | None = None,
            r: Any = None,
            streams_url: str | None = None,
        ) -> Fleet:
            if broker_url is None:
                broker_url = session_redis.url(REDIS_DB)
                r = r if streams_url is not None else broker
            if ledger_url is None:
                ledger_url = stack.enter_context(postgres_schema("faults"))
            return stack.enter_context(
                fleet(
                    name,
                    r=r,
                    broker_url=broker_url,
                    ledger_url=ledger_url,
                    faux_url=faux_url,
                    logs=tmp_path,
                    settings=settings or profile(3),
                    streams_url=streams_url,
                )
            )

        yield make


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[Figures], Figures]:
    def add(figures: Figures) -> Figures:
        line = f"{request.node.name}: {figures.line()}"
        print(line)
        _FIGURES.append(line)
        return figures

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("fault scenarios: checker figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
