"""The fleet suite's own redis-server (every Redis database number of the shared Redis is
taken by another suite or the benchmark): one per session, flushed around each use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.ownservers import OwnRedis, own_redis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[OwnRedis]:
    with own_redis() as server:
        yield server
