"""Login throttling: failed logins make an account and a client address wait, and only a few
password hashes run at once.

Every login attempt counts against the account name and against the client's address (in
Redis, so every console process shares the counts) *before* its password is checked, in one
atomic step with the check that neither must wait (``begin``): checking first and counting
after the hash would let a burst of concurrent guesses all pass the check before the first
failure was counted. A right password takes its count back (``succeeded``), and so does an
attempt that was never checked (``abandoned``: too many checks at once). After
``free_failures`` failures the subject must wait 2 s before its next attempt, then 4, 8, ...
up to ``max_wait_s``; past ``free_failures`` a subject has one attempt in flight at a time
(the others are told to retry in a second): its hold carries a token of its own, so an
attempt that ends takes back its own hold only, never one a later attempt set after it
(an abandoned attempt used to free the hold of another one in flight, letting a third
check run beside it). An attempt made while waiting is refused before
any hashing and does not count, so a person who waits always gets a try. A success clears
the account's count, not the address's.

Argon2 costs 64 MiB and tens of milliseconds a check: ``PasswordChecks`` lets ``slots``
run at once, a few more wait briefly, and the rest are refused at once (``Busy``), so a
burst of logins can neither exhaust memory nor starve the other pages.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import redis.asyncio as aioredis
from starlette.concurrency import run_in_threadpool

from shared import keys

__all__ = ["HOLD_RETRY_S", "Attempt", "Busy", "LoginThrottle", "PasswordChecks"]

T = TypeVar("T")

#: What a subject held by an attempt in flight is told to wait (s).
HOLD_RETRY_S: Final = 1
#: A hold outlives the longest check (a wait for a slot, then the hash) several times over;
#: it ends sooner when that check's outcome is known, and lapses if the process died.
_HOLD_MS: Final = 30_000
#: How the lock's value begins while a subject past its free failures has an attempt in
#: flight; the attempt's own token follows, so that it takes back its own hold only.
_HOLD: Final = "hold:"

#: KEYS: account failures, account lock, address failures, address lock.
#: ARGV: free failures, how long failures are kept (s), hold (ms), hold retry (ms), this
#: attempt's hold (``_HOLD`` and its token), ``_HOLD``.
#: Answers the wait in ms (nothing counted), or 0: counted, check the password.
_BEGIN: Final = """
local wait = 0
for i = 2, 4, 2 do
  local lock = redis.call('GET', KEYS[i])
  if lock and string.sub(lock, 1, #ARGV[6]) == ARGV[6] then
    wait = math.max(wait, tonumber(ARGV[4]))
  elseif lock then
    wait = math.max(wait, redis.call('PTTL', KEYS[i]))
  end
end
if wait > 0 then return wait end
for i = 1, 3, 2 do
  local n = redis.call('INCR', KEYS[i])
  redis.call('EXPIRE', KEYS[i], ARGV[2])
  if n > tonumber(ARGV[1]) then
    redis.call('SET', KEYS[i + 1], ARGV[5], 'PX', ARGV[3])
  end
end
return 0
"""

#: The attempt (counted already) failed. KEYS: failures, lock. ARGV: free failures, longest
#: wait (s). Answers the wait it imposes (s; 0: none yet).
_FAILED: Final = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local free = tonumber(ARGV[1])
if n < free then return 0 end
local wait = math.min(2 ^ math.min(n - free + 1, 30), tonumber(ARGV[2]))
redis.call('SET', KEYS[2], '1', 'EX', wait)
return wait
"""

#: Take an attempt's count back, and its hold if it is still the lock (another attempt's
#: hold, or a failure's wait, stays). KEYS: failures, lock. ARGV: this attempt's hold.
_UNCOUNT: Final = """
if redis.call('DECR', KEYS[1]) <= 0 then redis.call('DEL', KEYS[1]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 0
"""


class Busy(Exception):
    """Too many password checks are running or waiting: try again in a moment."""


def _subjects(name: str, address: str) -> tuple[str, str]:
    # Hashed: a name or address of any length or content makes a short, unambiguous key.
    def digest(kind: str, value: str) -> str:
        return f"{kind}-{hashlib.sha256(value.encode('utf-8', 'replace')).hexdigest()[:32]}"

    return digest("user", name), digest("addr", address)


def _keys(subject: str) -> list[str]:
    return [keys.console_login_failures(subject), keys.console_login_lock(subject)]


@dataclass(frozen=True)
class Attempt:
    """One login attempt ``LoginThrottle.begin`` saw: ``wait_s`` > 0, refused before any
    check (nothing counted); 0, counted, and its password may be checked now."""

    name: str
    address: str
    wait_s: float
    #: This attempt's hold, if it takes one (the lock's value while it is in flight).
    hold: str


class LoginThrottle:
    def __init__(self, client: aioredis.Redis, *, free_failures: int, max_wait_s: int) -> None:
        self.client = client
        self.free_failures = free_failures
        self.max_wait_s = max_wait_s
        # A subject's failures are forgotten after this long without another one.
        self.keep_s = max(4 * max_wait_s, 3600)
        self._begin = client.register_script(_BEGIN)
        self._failed = client.register_script(_FAILED)
        self._uncount = client.register_script(_UNCOUNT)

    async def begin(self, name: str, address: str) -> Attempt:
        """Count the attempt against the account and the address, unless either must still
        wait (then nothing is counted and ``wait_s`` says how long)."""
        account, place = _subjects(name, address)
        hold = _HOLD + secrets.token_hex(8)
        waited = await self._begin(
            keys=[*_keys(account), *_keys(place)],
            args=[self.free_failures, self.keep_s, _HOLD_MS, HOLD_RETRY_S * 1000, hold, _HOLD],
        )
        return Attempt(name, address, int(waited) / 1000, hold)

    async def failed(self, attempt: Attempt) -> float:
        """The attempt ``begin`` counted failed; the longer wait it imposes (0: none yet)."""
        waits = []
        for subject in _subjects(attempt.name, attempt.address):
            wait = await self._failed(
                keys=_keys(subject), args=[self.free_failures, self.max_wait_s]
            )
            waits.append(float(wait))
        return max(waits)

    async def succeeded(self, attempt: Attempt) -> None:
        """The attempt succeeded: the account starts afresh, the address only takes it back."""
        account, place = _subjects(attempt.name, attempt.address)
        await self.client.delete(*_keys(account))
        await self._uncount(keys=_keys(place), args=[attempt.hold])

    async def abandoned(self, attempt: Attempt) -> None:
        """The attempt's password was never checked: it counts against neither."""
        for subject in _subjects(attempt.name, attempt.address):
            await self._uncount(keys=_keys(subject), args=[attempt.hold])


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
