"""One compose fleet for the module: images built, docker-compose.yml (plus the CI override)
up under podman-compose, every service healthy; removed at the end, its logs kept."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.containers.podman import ComposeFleet, build_images, remove_leftovers, tools_or_fail
from tests.support.fleet import Fleet, profile, unique

#: The worker settings of deploy/ci/compose.override.yml (the test checks they are these).
CEILING_S = 20.0


@pytest.fixture(scope="session")
def container_logs() -> Path:
    """Outside pytest's own temporary folders, which later runs remove: kept for a look."""
    logs = Path(tempfile.gettempdir()) / "decision-worker-containers"
    logs.mkdir(exist_ok=True)
    return logs


@pytest.fixture(scope="module")
def compose_fleet(container_logs: Path) -> Iterator[ComposeFleet]:
    tools_or_fail()
    remove_leftovers()  # of an earlier run that was killed before its clean-up
    build_images(container_logs)
    fleet = ComposeFleet()
    try:
        fleet.up("worker", "console")
        fleet.wait_healthy(
            [
                fleet.container("redis"),
                fleet.container("postgres"),
                fleet.container("faux"),
                fleet.container("worker", 1),
                fleet.container("worker", 2),
                fleet.container("console"),
            ]
        )
        yield fleet
    finally:
        fleet.save_logs(container_logs / fleet.project)
        print(f"container logs: {container_logs / fleet.project}")
        fleet.down()


@pytest.fixture
def crew(compose_fleet: ComposeFleet, container_logs: Path) -> Iterator[Fleet]:
    """The host's view of the containers: a producer, the checker, the faux's counts."""
    r = redis.Redis.from_url(compose_fleet.url("redis"))
    fleet = Fleet(
        unique("ctr"),
        broker_url=compose_fleet.url("redis"),
        ledger_url=compose_fleet.url("postgres"),
        faux_url=compose_fleet.url("faux"),
        logs=container_logs,
        settings=profile(CEILING_S),
        r=r,
    )
    try:
        yield fleet
    finally:
        r.close()
