"""What a worker process keeps in flight: jobs running and provider requests, per provider.

``DECISIONS_MAX_IN_FLIGHT`` (N) bounds two things in one process, each per provider:

- **Jobs running** (``JobGate``): a job waits for a slot of its provider before it opens
  (before its row, its deadline, any claim), so a job waiting here has spent nothing of its
  deadline and a worker stopping warm can leave it to the broker (``close``: its message is
  not acknowledged, and is delivered again). A chunk of a thousand jobs takes slots one job at
  a time, next to the single-job messages around it, so a big message never holds back small
  ones for longer than its jobs' share of the slots.
- **Requests in flight** (``LocalLimiter``, a ``worker.providers.limiter.Limiter``): one
  request (one attempt) at a time holds a slot of its provider, so a job with many requests (a
  10,000-item sift) queues its requests behind other jobs' in FIFO order, and never takes more
  than N at once. The fleet-wide limiter (``DECISIONS_PROVIDER_LIMITS``), if any, is asked
  after the local slot is held.

Slots are per provider so that a slow provider fills only its own: the jobs and requests of
another provider go on at their own pace. What the broker queues in front of them is
another matter (messages come in queue order): the loop pool hands a message back to the
queue when its provider's slots and a waiting share are full (``worker.process.deferral``),
and a provider expected to be slow for long belongs on its own worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from shared.errors import NotAdmitted
from worker.providers.limiter import Limiter, NoLimiter

__all__ = ["JobGate", "LocalLimiter", "NotAdmitted", "job_provider"]


def job_provider(raw: Any, default: str = "") -> str:
    """The provider a raw job names (``default`` when it names none), read without parsing
    it."""
    if not isinstance(raw, dict):
        return default
    provider = raw.get("provider")
    if provider is None and isinstance(raw.get("runtime"), dict):
        provider = raw["runtime"].get("provider")
    return provider if isinstance(provider, str) and provider else default


class _Slots:
    """A FIFO semaphore per key while anyone holds or waits for it (an event loop's own:
    asyncio only). A key's semaphore goes when its last user leaves: keys come from jobs, and
    a stream of made-up provider names kept one each for good (found by an attack)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_key: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}

    def take(self, key: str) -> asyncio.Semaphore:
        """``key``'s semaphore, counted in use until ``leave(key)``."""
        slots = self._by_key.get(key)
        if slots is None:
            slots = self._by_key[key] = asyncio.Semaphore(self.limit)
        self._users[key] = self._users.get(key, 0) + 1
        return slots

    def leave(self, key: str) -> None:
        users = self._users[key] - 1
        if users:
            self._users[key] = users
        else:
            del self._users[key], self._by_key[key]

    def __len__(self) -> int:
        return len(self._by_key)


class JobGate:
    """Up to ``limit`` jobs running at once per provider; ``close`` stops admitting more."""

    def __init__(self, limit: int, default_provider: str = "") -> None:
        self._slots = _Slots(limit)
        self._closed = asyncio.Event()
        #: A job naming no provider takes the default one's slots, not slots of its own.
        self.default_provider = default_provider

    @property
    def limit(self) -> int:
        return self._slots.limit

    @asynccontextmanager
    async def slot(self, raw: Any) -> AsyncIterator[None]:
        """Hold a slot of ``raw``'s provider while the block runs; ``NotAdmitted`` if the
        gate closes first (nothing of the job was done)."""
        if self._closed.is_set():
            raise NotAdmitted("the worker is stopping: job left to the broker")
        key = job_provider(raw, self.default_provider)
        slots = self._slots.take(key)
        try:
            await self._acquire(slots)
            try:
                yield
            finally:
                slots.release()
        finally:
            self._slots.leave(key)

    async def _acquire(self, slots: asyncio.Semaphore) -> None:
        if not slots.locked():
            await slots.acquire()  # free: at once, no task made
            return
        acquire = asyncio.ensure_future(slots.acquire())
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({acquire, closed}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            closed.cancel()
            if acquire.done() and not acquire.cancelled():
                slots.release()  # got it just as the caller was cancelled
            else:
                acquire.cancel()
            raise
        closed.cancel()
        if not acquire.done():
            acquire.cancel()
            raise NotAdmitted("the worker is stopping: job left to the broker")

    @property
    def providers_tracked(self) -> int:
        """Providers with a job holding or waiting for a slot (tests)."""
        return len(self._slots)

    def close(self) -> None:
        """Admit no more jobs (a warm shutdown): those waiting raise ``NotAdmitted``."""
        self._closed.set()


class LocalLimiter:
    """At most ``limit`` requests in flight per provider in this process, then ``inner``."""

    def __init__(self, limit: int, inner: Limiter | None = None) -> None:
        self._slots = _Slots(limit)
        self._inner = inner or NoLimiter()

    async def acquire(self, provider: str) -> object:
        slots = self._slots.take(provider)
        try:
            await slots.acquire()
        except BaseException:
            self._slots.leave(provider)
            raise
        try:
            token = await self._inner.acquire(provider)
        except BaseException:
            slots.release()
            self._slots.leave(provider)
            raise
        return (provider, slots, token)

    async def release(self, token: object) -> None:
        assert isinstance(token, tuple)
        provider, slots, inner = token
        slots.release()
        self._slots.leave(provider)
        await self._inner.release(inner)

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        await self._inner.note_retry_after(provider, seconds)
