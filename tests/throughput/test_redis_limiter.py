"""Fleet-wide limits on the real Redis: two limiters stand for two workers sharing them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis

from shared import keys
from shared.setting_types import ProviderLimit
from tests.support.services import redis_database, redis_url
from tests.throughput.support import REDIS_DB
from worker.providers.redis_limiter import MAX_PAUSE_S, RedisLimiter, SlotToken

pytestmark = pytest.mark.integration


@pytest.fixture
def db() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def limiter(**limit: int) -> RedisLimiter:
    return RedisLimiter(redis_url(REDIS_DB), {"p": ProviderLimit(**limit)}, slot_ttl_s=30)


def test_in_flight_is_capped_across_workers_and_every_attempt_gets_its_turn(
    db: redis.Redis,
) -> None:
    holding = 0
    most = 0

    async def attempt(lim: RedisLimiter) -> None:
        nonlocal holding, most
        token = await lim.acquire("p")
        holding += 1
        most = max(most, holding)
        await asyncio.sleep(0.03)
        holding -= 1
        await lim.release(token)

    async def scenario() -> tuple[RedisLimiter, RedisLimiter]:
        a, b = limiter(max_in_flight=3), limiter(max_in_flight=3)
        await asyncio.gather(*(attempt(a if i % 2 else b) for i in range(20)))
        await a.aclose()
        await b.aclose()
        return a, b

    a, b = asyncio.run(scenario())
    assert most == 3  # never more than the fleet's 3, and the 3 were used
    assert a.stats.waits["p"] + b.stats.waits["p"] >= 10  # most of the 20 had to wait
    assert db.zcard(keys.rate_inflight("p")) == 0  # every slot released


def test_per_second_holds_in_every_one_second_window(db: redis.Redis) -> None:
    sent: list[float] = []

    async def attempt(lim: RedisLimiter) -> None:
        token = await lim.acquire("p")
        sent.append(time.monotonic())
        await lim.release(token)

    async def scenario() -> None:
        a, b = limiter(per_second=5), limiter(per_second=5)
        await asyncio.gather(*(attempt(a if i % 2 else b) for i in range(12)))
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())
    sent.sort()
    assert len(sent) == 12
    # Granted 200 ms apart, so any 6 consecutive sends span a second, less the scheduling
    # delay of a busy machine between a grant and its caller running (unlimited: ~0 s).
    assert min(sent[i + 5] - sent[i] for i in range(len(sent) - 5)) >= 0.8


def test_a_dead_workers_slots_expire(db: redis.Redis) -> None:
    async def scenario() -> float:
        dead = RedisLimiter(
            redis_url(REDIS_DB), {"p": ProviderLimit(max_in_flight=2)}, slot_ttl_s=0.4
        )
        await dead.acquire("p")
        await dead.acquire("p")  # and never released: this worker "dies"
        await dead.aclose()
        alive = limiter(max_in_flight=2)
        started = time.monotonic()
        token = await alive.acquire("p")
        waited = time.monotonic() - started
        assert isinstance(token, SlotToken)
        await alive.aclose()
        return waited

    waited = asyncio.run(scenario())
    assert 0.3 <= waited < 5


def test_retry_after_pauses_the_fleet_and_the_wait_is_reported(db: redis.Redis) -> None:
    seen: list[tuple[str, float]] = []

    async def scenario() -> float:
        a = limiter(max_in_flight=10)
        b = limiter(max_in_flight=10)
        b.on_wait = lambda provider, seconds: seen.append((provider, seconds))
        await a.note_retry_after("p", 0.5)
        await a.note_retry_after("p", 0.1)  # a shorter one never pulls the pause in
        started = time.monotonic()
        await b.release(await b.acquire("p"))
        waited = time.monotonic() - started
        await a.aclose()
        await b.aclose()
        return waited

    waited = asyncio.run(scenario())
    assert waited >= 0.4
    assert len(seen) == 1 and seen[0][0] == "p" and seen[0][1] >= 0.4


def test_a_retry_after_of_years_pauses_the_fleet_an_hour_at_most(db: redis.Redis) -> None:
    async def scenario() -> None:
        a = limiter(max_in_flight=10)
        await a.note_retry_after("p", 250_000_000_000.0)  # "Fri, 31 Dec 9999 23:59:59 GMT"
        await a.aclose()

    asyncio.run(scenario())
    assert 0 < db.pttl(keys.rate_pause("p")) <= (MAX_PAUSE_S + 1) * 1000


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.rate_pause("p"), "not a number"),
        (keys.rate_pause("p"), str(10**15)),  # a pause no release sets (garbage, hand-set)
        (keys.rate_window("p"), "not a number"),
        (keys.rate_inflight("p"), "a string, not a sorted set"),
    ],
)
def test_a_limiter_key_holding_garbage_is_overwritten_not_obeyed(
    db: redis.Redis, key: str, value: str
) -> None:
    db.set(key, value)  # no TTL: nothing would ever clear it

    async def scenario() -> None:
        lim = limiter(max_in_flight=2, per_second=50)
        async with asyncio.timeout(5):
            for _ in range(3):
                await lim.release(await lim.acquire("p"))
        await lim.aclose()

    asyncio.run(scenario())
    assert db.zcard(keys.rate_inflight("p")) == 0


def test_a_provider_without_limits_never_asks_redis() -> None:
    async def scenario() -> object:
        # Nothing listens on port 1: any Redis call would fail and make acquire wait.
        lim = RedisLimiter("redis://127.0.0.1:1/0", {"p": ProviderLimit(max_in_flight=1)})
        token = await asyncio.wait_for(lim.acquire("other"), 1)
        await lim.release(token)
        return token

    assert asyncio.run(scenario()) is None


def test_redis_down_makes_an_attempt_wait_never_go_unlimited() -> None:
    async def scenario() -> None:
        lim = RedisLimiter("redis://127.0.0.1:1/0", {"p": ProviderLimit(max_in_flight=1)})
        await asyncio.wait_for(lim.acquire("p"), 0.3)

    with pytest.raises(TimeoutError):
        asyncio.run(scenario())
