"""The hook for fleet-wide provider limits (concurrency, rate, a shared Retry-After).

The transport asks a limiter before every attempt and tells it when one ends, so a fleet can
later share limits through Redis without the transport changing. ``NoLimiter`` is the
default: it never waits.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Limiter", "NoLimiter"]


@runtime_checkable
class Limiter(Protocol):
    async def acquire(self, provider: str) -> object:
        """Wait for a slot to send one attempt to ``provider``; return a token for ``release``.

        It is awaited while nothing is in flight: a cancel or the deadline ending it means
        nothing was sent.
        """
        ...

    async def release(self, token: object) -> None:
        """The attempt holding ``token`` ended (answered, failed or lost)."""
        ...

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        """``provider`` answered 429 asking for ``seconds`` of quiet (share it with the fleet)."""
        ...


class NoLimiter:
    """No fleet-wide limits: every attempt goes at once."""

    async def acquire(self, provider: str) -> object:
        return None

    async def release(self, token: object) -> None:
        return None

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        return None
