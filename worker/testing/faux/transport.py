"""The faux in process: an ``httpx.MockTransport`` for sync and async clients alike.

Connection-level outcomes raise what real httpx raises against a loopback server that does
the same (pinned against the real server in the tests): a close, before or after reading,
is ``RemoteProtocolError``; an RST after reading is ``ReadError``. A delay longer than the
client's read timeout waits that timeout and raises ``ReadTimeout``, as a slow host does.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import httpx

from .outcome import FauxDrop, FauxResponse, Outcome

if TYPE_CHECKING:
    from .app import FauxProvider

__all__ = ["FauxTransport"]


def _read_timeout(request: httpx.Request) -> float | None:
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read")
    return float(value) if value is not None else None


def _play(request: httpx.Request, outcome: Outcome) -> httpx.Response:
    if isinstance(outcome, FauxDrop):
        if outcome.reset:
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        raise httpx.RemoteProtocolError(
            "Server disconnected without sending a response.", request=request
        )
    return _response(request, outcome)


def _response(request: httpx.Request, outcome: FauxResponse) -> httpx.Response:
    return httpx.Response(
        outcome.status, headers=outcome.headers, content=outcome.body, request=request
    )


class FauxTransport(httpx.MockTransport):
    """``MockTransport`` whose latency blocks a sync client and awaits in an async one."""

    def __init__(self, provider: FauxProvider) -> None:
        self.provider = provider
        super().__init__(self._unused)

    @staticmethod
    def _unused(request: httpx.Request) -> httpx.Response:  # pragma: no cover
        raise RuntimeError("FauxTransport handles requests itself")

    def _plan(self, request: httpx.Request) -> tuple[float, float | None, Outcome]:
        delay, outcome = self.provider.plan(
            request.method,
            request.url.path,
            dict(request.url.params),
            dict(request.headers),
            request.content,
        )
        return delay, _read_timeout(request), outcome

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        delay, timeout, outcome = self._plan(request)
        with self.provider.waiting():
            if timeout is not None and delay > timeout:
                time.sleep(timeout)
                raise httpx.ReadTimeout("timed out", request=request)
            if delay > 0:
                time.sleep(delay)
        return _play(request, outcome)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        delay, timeout, outcome = self._plan(request)
        with self.provider.waiting():
            if timeout is not None and delay > timeout:
                await asyncio.sleep(timeout)
                raise httpx.ReadTimeout("timed out", request=request)
            if delay > 0:
                await asyncio.sleep(delay)
        return _play(request, outcome)
