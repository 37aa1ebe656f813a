"""Concurrent guesses against the login throttle, in a real `decisions console` on a real
Redis: an attempt is counted before its password is checked, so a burst of guesses sent at
once gets no more checks than the same guesses sent one by one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from tests.console.server import Visitor, console_env, console_server
from tests.console.support import REDIS_DB
from tests.support.services import redis_database, redis_url
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

FREE_FAILURES = 3
BURST = 10


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("console-bursts")
    env = console_env(
        REDIS_DB,
        _ledger(where),
        console_login_free_failures=str(FREE_FAILURES),
        console_login_lockout_max_s="4",
        console_password_checks="2",
    )
    with redis_database(REDIS_DB), console_server(env, where / "console.log") as url:
        yield url


@pytest.fixture
def url(served: str) -> Iterator[str]:
    # Emptied before and after: no test inherits another's failures or locks.
    with redis_database(REDIS_DB):
        yield served


def _burst(url: str, names: list[str]) -> list[int]:
    """One login attempt per name, all at once, each from its own fresh session (and
    connection: one kept alive across a wait may be closed by the server just as it is used)."""
    visitors = [Visitor(url) for _ in names]
    for visitor in visitors:
        visitor.get("/login")

    def attempt(i: int) -> int:
        body = {"username": names[i], "password": f"guess-{time.monotonic_ns()}"}
        return visitors[i].post("/login", body).status_code

    try:
        with ThreadPoolExecutor(len(visitors)) as pool:
            return list(pool.map(attempt, range(len(visitors))))
    finally:
        for visitor in visitors:
            visitor.close()


def _wait_out_the_locks() -> None:
    with redis.Redis.from_url(redis_url(REDIS_DB)) as client:
        waits = [int(client.pttl(key)) for key in client.scan_iter("*login-lock*")]
    time.sleep(max([0, *waits]) / 1000 + 0.2)


@pytest.mark.parametrize("spread", [False, True], ids=["one-account", "one-address"])
def test_a_burst_of_guesses_gets_no_more_checks_than_guesses_one_by_one(
    url: str, spread: bool
) -> None:
    # One account, or (spread) a name each: then the shared address is what is throttled.
    names = [f"mallory-{i}" if spread else "ann" for i in range(BURST)]
    first = _burst(url, names)
    assert set(first) <= {401, 429, 503}, first
    # The free failures, and one more (the one that earns the first wait): never the burst.
    assert first.count(401) <= FREE_FAILURES + 1, first

    _wait_out_the_locks()
    again = _burst(url, names)
    assert set(again) <= {401, 429, 503}, again
    assert again.count(401) <= 1, again


def test_a_right_password_after_the_wait_is_let_in_and_leaves_no_hold(url: str) -> None:
    _burst(url, ["ann"] * BURST)
    _wait_out_the_locks()
    bob, ann = Visitor(url), Visitor(url)
    try:
        assert bob.login("bob").status_code == 303
        # The address is past its free failures, but nobody is mid-check: the next one goes in.
        assert ann.login("ann").status_code == 303
    finally:
        bob.close()
        ann.close()


def _ledger(where: Path) -> str:
    url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(url) as ledger:
        ledger.migrate()
    return url
