"""Fleet-wide provider limits in Redis: requests in flight, requests a second, Retry-After.

Every worker process of a fleet asks the same Redis before each attempt, so the limits hold
for the fleet, not per process. One Lua script per operation that reads and writes, run with
Redis's own clock (``TIME``) so that workers' clocks never disagree:

- ``acquire``: a provider paused by a Retry-After answers "wait until then"; else expired
  slots are dropped, and the attempt gets a slot if fewer than ``max_in_flight`` are held
  and the rate allows a send now. A slot is a member of the provider's in-flight sorted set
  scored by its expiry (``limit_slot_ttl_s``), so a worker that died holding one lets it go
  by itself. The rate is a GCRA (one key: the next send's theoretical time): sends are
  spaced ``1/per_second`` apart with a burst of ``BURST_S`` worth, never a second's worth
  at the start of a window, because requests reach the provider with some jitter and a
  provider counting its own one-second windows would see two bursts in one (measured: a
  sliding-window limit of 40/s met 11 429s in 240 sends from a faux allowing 50/s).
- ``release``: the attempt ended; its slot goes (one ZREM, atomic on its own).
- ``note_retry_after``: a 429 asked for quiet; the provider's pause is pushed out to then
  (never pulled in) and every worker waits for it before its next attempt.

A waiting attempt sleeps for what the script says (the window's or the pause's end) or,
waiting for a slot, until this process releases one or a short poll passes (slots released
by other workers). Each wait is counted per provider and passed to ``on_wait`` so the
metrics can say when the fleet held back. Redis failing makes an attempt wait (and try
again) rather than go unlimited: the transport's deadline then ends it with nothing sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shared import keys
from shared.redis_connect import CONNECT_TIMEOUT_S
from shared.setting_types import ProviderLimit
from shared.settings import Settings

__all__ = ["MAX_PAUSE_S", "LimiterStats", "RedisLimiter", "SlotToken", "WaitCallback"]

log = logging.getLogger(__name__)

#: ``on_wait(provider, seconds)``: an attempt to ``provider`` waited that long for the limits.
WaitCallback = Callable[[str, float], None]

#: Returns 0 (slot taken), -1 (every slot held: wait for a release) or ms to wait.
#: A key that does not hold what this script writes (garbage, another type, a pause longer
#: than any this release sets) is read as absent and overwritten: left alone, it made the
#: script fail, or wait, on every attempt of every worker until someone deleted it.
_ACQUIRE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pause = tonumber(redis.pcall('GET', KEYS[3])) or 0
if pause > now + tonumber(ARGV[6]) then
  redis.call('DEL', KEYS[3])
elseif pause > now then
  return pause - now
end
local max_in_flight = tonumber(ARGV[2])
local per_second = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
if max_in_flight > 0 then
  local dropped = redis.pcall('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if type(dropped) == 'table' and dropped.err then
    redis.call('DEL', KEYS[1])
  end
  if redis.call('ZCARD', KEYS[1]) >= max_in_flight then
    return -1
  end
end
if per_second > 0 then
  -- GCRA: sends spaced 1/per_second apart, with a burst of BURST_S worth.
  local interval = 1000 / per_second
  local tolerance = math.max(0, per_second * tonumber(ARGV[5]) - 1) * interval
  local tat = math.max(tonumber(redis.pcall('GET', KEYS[2])) or 0, now)
  if tat - now > tolerance then
    return math.max(1, math.ceil(tat - tolerance - now))
  end
  redis.call('SET', KEYS[2], tostring(tat + interval), 'PX', math.ceil(tat + interval - now) + 1000)
end
if max_in_flight > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 0
"""

#: Pushes the pause out to now + ARGV[1] ms (never in); returns the pause's end.
_PAUSE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ms = tonumber(ARGV[1])
local until_ms = now + ms
local current = tonumber(redis.pcall('GET', KEYS[1])) or 0
if until_ms > current then
  redis.call('SET', KEYS[1], until_ms, 'PX', ms + 1000)
  return until_ms
end
return current
"""

#: The rate's burst: this many seconds' worth of sends may go at once (at least one).
BURST_S: Final = 0.1
#: How long a waiter for a slot sleeps before asking Redis again (others' releases).
SLOT_POLL_S: Final = 0.02
#: How long to wait before asking again after Redis failed.
REDIS_RETRY_S: Final = 0.5
#: The longest fleet-wide pause one 429 sets. A Retry-After of days (a quota's reset, or a
#: date in year 9999 from a broken server) would otherwise stop every worker's sends to the
#: provider that long; capped, the fleet asks again after an hour and pauses again if told.
MAX_PAUSE_S: Final = 3600.0
_MAX_CONNECTIONS: Final = 32


@dataclass(frozen=True, slots=True)
class SlotToken:
    provider: str
    member: str


@dataclass
class LimiterStats:
    """Waits per provider since start: how many attempts waited, and for how long in all."""

    waits: Counter[str] = field(default_factory=Counter)
    waited_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pauses: Counter[str] = field(default_factory=Counter)


class RedisLimiter:
    """The ``Limiter`` of a fleet; see the module docstring."""

    def __init__(
        self,
        redis_url: str,
        limits: Mapping[str, ProviderLimit],
        *,
        slot_ttl_s: float = 60.0,
        on_wait: WaitCallback | None = None,
        client: aioredis.Redis | None = None,
    ) -> None:
        self._url = redis_url
        self._limits = {
            name: limit
            for name, limit in limits.items()
            if limit.max_in_flight is not None or limit.per_second is not None
        }
        self._ttl_ms = int(slot_ttl_s * 1000)
        self._client = client
        self._acquire_script: Any = None
        self._pause_script: Any = None
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}
        self.on_wait = on_wait
        self.stats = LimiterStats()

    @classmethod
    def from_settings(
        cls, settings: Settings, *, on_wait: WaitCallback | None = None
    ) -> RedisLimiter:
        # A slot must outlive the longest attempt, or the fleet could exceed its limit.
        ttl = max(settings.limit_slot_ttl_s, settings.provider_timeout_s + 5.0)
        return cls(settings.redis_url, settings.provider_limits, slot_ttl_s=ttl, on_wait=on_wait)

    def limits(self, provider: str) -> ProviderLimit | None:
        return self._limits.get(provider)

    def _redis(self) -> aioredis.Redis:
        # Made on first use, on the loop that uses it (redis.asyncio binds to a loop).
        if self._client is None:
            pool = aioredis.BlockingConnectionPool.from_url(
                self._url,
                max_connections=_MAX_CONNECTIONS,
                timeout=None,
                socket_connect_timeout=CONNECT_TIMEOUT_S,  # and the TLS handshake
            )
            self._client = aioredis.Redis(connection_pool=pool)
        if self._acquire_script is None:
            self._acquire_script = self._client.register_script(_ACQUIRE)
            self._pause_script = self._client.register_script(_PAUSE)
        return self._client

    # --- the Limiter protocol ----------------------------------------------------------

    async def acquire(self, provider: str) -> object:
        limit = self._limits.get(provider)
        if limit is None:
            return None
        token = SlotToken(provider, os.urandom(12).hex())
        waited = 0.0
        try:
            while True:
                answer = await self._try(token, limit)
                if answer == 0:
                    return token
                started = time.monotonic()
                await self._wait(provider, answer)
                waited += time.monotonic() - started
        except asyncio.CancelledError:
            # The script may have granted the slot as the cancel came: give it back.
            if limit.max_in_flight is not None:
                asyncio.get_running_loop().create_task(self._forget(token))
            raise
        finally:
            if waited > 0:
                self._count_wait(provider, waited)

    async def release(self, token: object) -> None:
        if not isinstance(token, SlotToken):
            return
        limit = self._limits.get(token.provider)
        if limit is not None and limit.max_in_flight is not None:
            await self._forget(token)
        queue = self._waiters.get(token.provider)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        if seconds <= 0:
            return
        self.stats.pauses[provider] += 1
        try:
            self._redis()
            await self._pause_script(
                keys=[keys.rate_pause(provider)],
                args=[max(1, int(min(seconds, MAX_PAUSE_S) * 1000))],
            )
        except RedisError as exc:
            log.warning("limiter: could not share a Retry-After for %s: %s", provider, exc)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    # --- helpers -----------------------------------------------------------------------

    async def _try(self, token: SlotToken, limit: ProviderLimit) -> int:
        try:
            self._redis()
            answer = await self._acquire_script(
                keys=[
                    keys.rate_inflight(token.provider),
                    keys.rate_window(token.provider),
                    keys.rate_pause(token.provider),
                ],
                args=[
                    token.member,
                    limit.max_in_flight or 0,
                    limit.per_second or 0,
                    self._ttl_ms,
                    BURST_S,
                    int(MAX_PAUSE_S * 1000),
                ],
            )
        except RedisError as exc:
            log.warning("limiter: Redis failed for %s (%s); waiting", token.provider, exc)
            return int(REDIS_RETRY_S * 1000)
        return int(answer)

    async def _wait(self, provider: str, answer: int) -> None:
        if answer > 0:
            # A window or a pause ends then; a little jitter so waiters do not all ask at once.
            await asyncio.sleep(answer / 1000 * random.uniform(1.0, 1.1))  # jitter, not crypto
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiters.setdefault(provider, deque())
        queue.append(waiter)
        try:
            await asyncio.wait_for(waiter, SLOT_POLL_S)
        except TimeoutError:
            with contextlib.suppress(ValueError):
                queue.remove(waiter)

    async def _forget(self, token: SlotToken) -> None:
        try:
            await self._redis().zrem(keys.rate_inflight(token.provider), token.member)
        except RedisError as exc:
            # The slot expires by itself (limit_slot_ttl_s).
            log.warning("limiter: could not release a slot of %s: %s", token.provider, exc)

    def _count_wait(self, provider: str, seconds: float) -> None:
        self.stats.waits[provider] += 1
        self.stats.waited_s[provider] += seconds
        if self.on_wait is not None:
            try:
                self.on_wait(provider, seconds)
            except Exception:
                log.exception("limiter: on_wait failed")
