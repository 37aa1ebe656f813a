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


def job_provider(raw: Any) -> str:
    """The provider a raw job names (``""``: the default one), read without parsing it."""
    if not isinstance(raw, dict):
        return ""
    provider = raw.get("provider")
    if provider is None and isinstance(raw.get("runtime"), dict):
        provider = raw["runtime"].get("provider")
    return provider if isinstance(provider, str) else ""


class _Slots:
    """A FIFO semaphore per key, made on first use (an event loop's own: asyncio only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_key: dict[str, asyncio.Semaphore] = {}

    def of(self, key: str) -> asyncio.Semaphore:
        slots = self._by_key.get(key)
        if slots is None:
            slots = self._by_key[key] = asyncio.Semaphore(self.limit)
        return slots


class JobGate:
    """Up to ``limit`` jobs running at once per provider; ``close`` stops admitting more."""

    def __init__(self, limit: int) -> None:
        self._slots = _Slots(limit)
        self._closed = asyncio.Event()

    @property
    def limit(self) -> int:
        return self._slots.limit

    @asynccontextmanager
    async def slot(self, raw: Any) -> AsyncIterator[None]:
        """Hold a slot of ``raw``'s provider while the block runs; ``NotAdmitted`` if the
        gate closes first (nothing of the job was done)."""
        if self._closed.is_set():
            raise NotAdmitted("the worker is stopping: job left to the broker")
        slots = self._slots.of(job_provider(raw))
        if not slots.locked():
            await slots.acquire()  # free: at once, no task made
        else:
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
        try:
            yield
        finally:
            slots.release()

    def close(self) -> None:
        """Admit no more jobs (a warm shutdown): those waiting raise ``NotAdmitted``."""
        self._closed.set()


class LocalLimiter:
    """At most ``limit`` requests in flight per provider in this process, then ``inner``."""

    def __init__(self, limit: int, inner: Limiter | None = None) -> None:
        self._slots = _Slots(limit)
        self._inner = inner or NoLimiter()

    async def acquire(self, provider: str) -> object:
        slots = self._slots.of(provider)
        await slots.acquire()
        try:
            token = await self._inner.acquire(provider)
        except BaseException:
            slots.release()
            raise
        return (slots, token)

    async def release(self, token: object) -> None:
        assert isinstance(token, tuple)
        slots, inner = token
        slots.release()
        await self._inner.release(inner)

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        await self._inner.note_retry_after(provider, seconds)
