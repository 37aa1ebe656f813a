"""Login throttling: failed logins make an account and a client address wait, and only a few
password hashes run at once.

Every failed login counts against the account name and against the client's address (in
Redis, so every console process shares the counts). After ``free_failures`` failures the
subject must wait 2 s before its next attempt, then 4, 8, ... up to ``max_wait_s``; an
attempt made while waiting is refused before any hashing (it does not count, so a person
who waits always gets a try). A success clears the account's count, not the address's.

Argon2 costs 64 MiB and tens of milliseconds a check: ``PasswordChecks`` lets ``slots``
run at once, a few more wait briefly, and the rest are refused at once (``Busy``), so a
burst of logins can neither exhaust memory nor starve the other pages.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Final, TypeVar

import redis.asyncio as aioredis
from starlette.concurrency import run_in_threadpool

from shared import keys

__all__ = ["Busy", "LoginThrottle", "PasswordChecks"]

T = TypeVar("T")

#: KEYS: failures, lock. ARGV: free failures, longest wait (s), how long failures are kept (s).
_FAILED: Final = """
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local free = tonumber(ARGV[1])
if n < free then return 0 end
local wait = math.min(2 ^ math.min(n - free + 1, 30), tonumber(ARGV[2]))
redis.call('SET', KEYS[2], '1', 'EX', wait)
return wait
"""


class Busy(Exception):
    """Too many password checks are running or waiting: try again in a moment."""


def _subjects(name: str, address: str) -> tuple[str, str]:
    # Hashed: a name or address of any length or content makes a short, unambiguous key.
    def digest(kind: str, value: str) -> str:
        return f"{kind}-{hashlib.sha256(value.encode('utf-8', 'replace')).hexdigest()[:32]}"

    return digest("user", name), digest("addr", address)


class LoginThrottle:
    def __init__(self, client: aioredis.Redis, *, free_failures: int, max_wait_s: int) -> None:
        self.client = client
        self.free_failures = free_failures
        self.max_wait_s = max_wait_s
        # A subject's failures are forgotten after this long without another one.
        self.keep_s = max(4 * max_wait_s, 3600)
        self._failed = client.register_script(_FAILED)

    async def wait_s(self, name: str, address: str) -> float:
        """How long the account or the address must still wait (0: it may try now)."""
        pipe = self.client.pipeline(transaction=False)
        for subject in _subjects(name, address):
            pipe.pttl(keys.console_login_lock(subject))
        left = await pipe.execute()
        return max(0, *(int(ms) for ms in left)) / 1000

    async def failed(self, name: str, address: str) -> float:
        """Count a failure against both; the longer wait it now imposes (0: none yet)."""
        waits = []
        for subject in _subjects(name, address):
            wait = await self._failed(
                keys=[keys.console_login_failures(subject), keys.console_login_lock(subject)],
                args=[self.free_failures, self.max_wait_s, self.keep_s],
            )
            waits.append(float(wait))
        return max(waits)

    async def succeeded(self, name: str) -> None:
        account, _ = _subjects(name, "")
        await self.client.delete(
            keys.console_login_failures(account), keys.console_login_lock(account)
        )


class PasswordChecks:
    """At most ``slots`` password checks at once; ``queue`` more may wait up to ``wait_s``."""

    def __init__(self, slots: int, *, queue: int | None = None, wait_s: float = 3.0) -> None:
        self.slots = slots
        self.queue = 4 * slots if queue is None else queue
        self.wait_s = wait_s
        self._semaphore = asyncio.Semaphore(slots)
        self._waiting = 0

    async def run(self, check: Callable[..., T], *args: object) -> T:
        if self._semaphore.locked() and self._waiting >= self.queue:
            raise Busy
        self._waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await self._semaphore.acquire()
        except TimeoutError:
            raise Busy from None
        finally:
            self._waiting -= 1
        try:
            # In a thread: the hash takes CPU on purpose, never on the event loop. A client
            # that goes away does not free the slot before the thread is done.
            return await run_in_threadpool(check, *args)
        finally:
            self._semaphore.release()
