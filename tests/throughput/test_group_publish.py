"""Group publish: the terminal messages of concurrent jobs share Redis round trips, and each
keeps the publish-once rule and its own verdict. On the local Redis, and on one of the
test's own that it kills."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from shared import keys
from shared.replies import EscalationMessage, ResultMessage
from shared.streams import Publication, RedisPublisher, read_entries, read_stream
from tests.support.ownservers import own_redis
from tests.support.services import redis_database
from tests.throughput.support import REDIS_DB
from worker.delivery.reply_batch import GroupPublish

pytestmark = pytest.mark.integration

STREAM = "test:group-publish:replies"
ESCALATIONS = "test:group-publish:escalations"


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def result(job_id: str) -> Publication:
    return Publication(STREAM, job_id, "result", ResultMessage(job_id=job_id).to_json())


def escalated(job_id: str) -> Publication:
    message = EscalationMessage(job_id=job_id, reason="low_confidence").to_json()
    return Publication(STREAM, job_id, "escalation", message, escalation=True)


def test_many_publishes_share_round_trips_and_each_lands_once(client: redis.Redis) -> None:
    group = GroupPublish(RedisPublisher(client, ttl_s=60, escalation_stream=ESCALATIONS))
    ids = [f"j{i:03d}" for i in range(300)]

    async def scenario() -> tuple[list[Any], list[Any]]:
        first = await asyncio.gather(
            *(
                group.publish(escalated(i) if n % 10 == 0 else result(i))
                for n, i in enumerate(ids)
            )
        )
        # Every one again (a redelivery replaying from the ledger), some twice in one batch.
        again = await asyncio.gather(*(group.publish(result(i)) for i in ids + ids[:20]))
        return first, again

    first, again = asyncio.run(scenario())
    group.close()
    assert first == [True] * len(ids)
    assert again == [False] * (len(ids) + 20)
    assert group.batches < group.writes / 4, (group.batches, group.writes)
    entries = list(read_stream(client, STREAM))
    assert sorted(e.job_id for e in entries) == ids
    kinds = {e.job_id: e.type for e in entries}
    assert kinds["j000"] == "escalation" and kinds["j001"] == "result"
    on_escalations = [e.job_id for e in read_entries(client, ESCALATIONS)]
    assert sorted(on_escalations) == ids[::10]
    assert client.exists(keys.published_marker(STREAM, "j123")) == 1


def test_a_marker_names_the_publication_it_guards(client: redis.Redis) -> None:
    group = GroupPublish(RedisPublisher(client, ttl_s=60, escalation_stream=ESCALATIONS))

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            group.publish(replace(result("same"), marker="rejected:1")),
            group.publish(replace(result("same"), marker="rejected:2")),
            group.publish(replace(result("same"), marker="rejected:1")),
        )

    answers = asyncio.run(scenario())
    group.close()
    assert answers == [True, True, False]
    assert len(list(read_stream(client, STREAM))) == 2


def test_redis_gone_fails_every_waiting_publish_and_nothing_is_lost(tmp_path: Path) -> None:
    with own_redis() as server:
        client = redis.Redis.from_url(server.url(), socket_timeout=2)
        group = GroupPublish(RedisPublisher(client, ttl_s=60, escalation_stream=ESCALATIONS))

        async def publish(ids: list[str]) -> list[Any]:
            return await asyncio.gather(
                *(group.publish(result(i)) for i in ids), return_exceptions=True
            )

        assert asyncio.run(publish(["a", "b"])) == [True, True]
        server.kill()
        down = asyncio.run(publish(["c", "d", "e"]))
        assert all(isinstance(answer, redis.ConnectionError) for answer in down), down
        server.start()
        # The callers were told nothing was published; their replay publishes each once.
        assert asyncio.run(publish(["a", "c", "d", "e"])) == [False, True, True, True]
        group.close()
        assert sorted(e.job_id for e in read_stream(client, STREAM)) == ["a", "b", "c", "d", "e"]
        client.close()
