"""The login throttle's holds (``worker.console.throttle``): past its free failures a subject
has one password check in flight at a time, and an attempt that ends takes back its own
hold only, never one another attempt set since (fakeredis with Lua; the console's own
tests drive the same throttle through HTTP on a real Redis)."""

from __future__ import annotations

import asyncio

import fakeredis

from shared import keys
from worker.console.throttle import LoginThrottle, _subjects

FREE = 3


def _past_free(r: fakeredis.FakeAsyncRedis, subject: str) -> None:
    asyncio.run(r.set(keys.console_login_failures(subject), FREE))


def test_an_abandoned_attempt_leaves_a_hold_another_attempt_set() -> None:
    async def scenario() -> tuple[float, float, float]:
        r = fakeredis.FakeAsyncRedis()
        throttle = LoginThrottle(r, free_failures=FREE, max_wait_s=60)
        account, _ = _subjects("alice", "10.0.0.1")
        # Alice's account is past its free failures (a hold on it); the address is not yet.
        await r.set(keys.console_login_failures(account), FREE)
        a = await throttle.begin("alice", "10.0.0.1")
        # The address passes its free failures with other names: the third takes its hold.
        await r.set(keys.console_login_failures(_subjects("x", "10.0.0.1")[1]), FREE)
        c = await throttle.begin("carol", "10.0.0.1")
        # Alice's attempt is never checked (too many checks at once) and is taken back...
        await throttle.abandoned(a)
        # ...while Carol's check is still in flight: the address must still be held.
        d = await throttle.begin("dave", "10.0.0.1")
        return a.wait_s, c.wait_s, d.wait_s

    a, c, d = asyncio.run(scenario())
    assert (a, c) == (0, 0)  # both were let through to check a password
    assert d > 0, "a second check ran for the address while Carol's was in flight"


def test_an_attempt_takes_back_its_own_hold() -> None:
    async def scenario() -> tuple[float, float]:
        r = fakeredis.FakeAsyncRedis()
        throttle = LoginThrottle(r, free_failures=FREE, max_wait_s=60)
        account, _ = _subjects("alice", "10.0.0.1")
        await r.set(keys.console_login_failures(account), FREE)
        first = await throttle.begin("alice", "10.0.0.1")
        held = await throttle.begin("alice", "10.0.0.1")  # one in flight at a time
        await throttle.abandoned(first)
        again = await throttle.begin("alice", "10.0.0.1")
        return held.wait_s, again.wait_s

    held, again = asyncio.run(scenario())
    assert held > 0
    assert again == 0
