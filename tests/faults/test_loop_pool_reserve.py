"""The loop pool reserves jobs, not messages (``worker.process.prefetch``): against a real
worker, Redis and faux provider.

Before, a worker reserved ``2 x DECISIONS_MAX_IN_FLIGHT`` messages whatever they held: with
a slow provider it took 200 messages of 32 jobs of 50 KB each (256 jobs in flight) and grew
to 1.6 GB, an OOM kill under a container's limit, and the messages went on to the next
worker. Here 16 in flight reserve 32 slots: four messages of 8 jobs, or 32 single jobs.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.faults.conftest import FleetFactory
from tests.faults.test_servers_restart import private_redis  # noqa: F401  (a fixture)
from tests.support.fleet import Fleet, profile, wait_until
from tests.support.ownservers import OwnRedis

pytestmark = pytest.mark.faults

IN_FLIGHT = 16
LATENCY_MS = 6000


def _reserving(crew: Fleet, jobs_per_message: int, messages: int) -> int:
    """The most messages the worker held at once (kombu's unacked hash) while the faux held
    its first requests (``LATENCY_MS``): before any message could be done and acknowledged."""
    batches = [crew.jobs(jobs_per_message, f"m{i}") for i in range(messages)]
    crew.misbehave([job["id"] for batch in batches for job in batch], latency_ms=LATENCY_MS)
    for batch in batches:
        crew.submit(batch, chunk_size=jobs_per_message)
    until = time.monotonic() + 30
    while not crew.broker.hlen("unacked") and time.monotonic() < until:
        time.sleep(0.02)
    most = 0
    window = time.monotonic() + LATENCY_MS / 1000 - 1.5
    while time.monotonic() < window:
        most = max(most, int(crew.broker.hlen("unacked")))
        time.sleep(0.05)
    crew.expect_replies(crew.pairs(job["id"] for batch in batches for job in batch), 120)
    return most


def test_chunked_messages_are_reserved_by_their_jobs(new_fleet: FleetFactory) -> None:
    settings = profile(90, worker_pool="loop", max_in_flight=str(IN_FLIGHT))
    crew = new_fleet("reserve-chunks", settings)
    worker = crew.start_worker()
    # 32 slots: four messages of 8 (two in flight, two waiting), not all eight.
    assert _reserving(crew, 8, 8) == 4
    assert worker.alive()


def test_single_job_messages_are_reserved_as_before(new_fleet: FleetFactory) -> None:
    settings = profile(90, worker_pool="loop", max_in_flight=str(IN_FLIGHT))
    crew = new_fleet("reserve-singles", settings)
    crew.start_worker()
    assert _reserving(crew, 1, 40) == 2 * IN_FLIGHT


def test_the_reserve_is_whole_again_after_the_broker_restarts(
    private_redis: OwnRedis,  # noqa: F811  (first: the fleet's workers stop before it)
    new_fleet: FleetFactory,
) -> None:
    # Celery sizes the prefetch count anew on a reconnect from the pool's process count;
    # the loop pool is one process, so one message at a time after any broker blip.
    r = redis.Redis.from_url(private_redis.url())
    settings = profile(90, worker_pool="loop", max_in_flight=str(IN_FLIGHT))
    crew = new_fleet("reserve-restart", settings, broker_url=private_redis.url(), r=r)
    worker = crew.start_worker()
    connected = worker.text().count("Connected to redis")
    private_redis.kill()
    time.sleep(1)
    private_redis.start()
    wait_until(lambda: worker.text().count("Connected to redis") > connected, 60, "reconnect")
    assert _reserving(crew, 1, 40) == 2 * IN_FLIGHT
