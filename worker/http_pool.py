"""One ``httpx.AsyncClient`` for hundreds of requests in flight: connections kept one a pool.

httpcore 1.0's ``AsyncConnectionPool`` walks all its connections on every request and every
release (``_assign_requests_to_connections``: quadratic in the connections, a ``poll()`` per
idle socket through ``has_expired``; encode/httpcore#1035, encode/httpx#3215), so one pool of
N connections costs O(N) or worse per request: measured here against the faux at 0 ms,
554 req/s with 10 connections and 289 with 300, against 1,343 and 1,209 from 1-connection
pools. ``ShardedTransport`` keeps a stack of idle single-connection pools per origin and
hands each request one of them in O(1); httpcore still does every byte of HTTP, its trace
events (which the providers' transport reads to tell "never sent" from "maybe sent") and its
pool timeout, which applies only once every connection is busy.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx

__all__ = ["ShardedTransport", "sharded_client"]

Origin = tuple[bytes, bytes, int | None]


@dataclass(eq=False)
class _Shard:
    transport: httpx.AsyncHTTPTransport
    in_flight: int = 0
    idle_listed: bool = False


@dataclass
class _OriginPool:
    shards: list[_Shard] = field(default_factory=list)
    idle: list[_Shard] = field(default_factory=list)


class _ReleasingStream(httpx.AsyncByteStream):
    """The response body; closing it (httpx always does) gives the connection back."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class ShardedTransport(httpx.AsyncBaseTransport):
    """Up to ``max_connections`` single-connection httpcore pools per origin, idle ones first."""

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self._limits = httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=keepalive_expiry
        )
        # One context for every pool: making one loads the CA bundle (measured: ~20 ms
        # each, 75% of the CPU of a run that opened 512 connections).
        self._ssl = ssl_context or httpx.create_ssl_context()
        self._origins: dict[Origin, _OriginPool] = {}

    def connections(self) -> int:
        """Pools made so far, over every origin (each holds at most one connection)."""
        return sum(len(pool.shards) for pool in self._origins.values())

    def _pick(self, pool: _OriginPool) -> _Shard:
        while pool.idle:
            shard = pool.idle.pop()
            shard.idle_listed = False
            if shard.in_flight == 0:
                return shard
        if len(pool.shards) < self.max_connections:
            shard = _Shard(httpx.AsyncHTTPTransport(limits=self._limits, verify=self._ssl))
            pool.shards.append(shard)
            return shard
        # Every connection is busy: queue in one pool, where httpcore's pool timeout applies.
        return random.choice(pool.shards)  # spreading load, not crypto

    def _release(self, pool: _OriginPool, shard: _Shard) -> None:
        shard.in_flight -= 1
        if shard.in_flight == 0 and not shard.idle_listed:
            shard.idle_listed = True
            pool.idle.append(shard)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin: Origin = (url.raw_scheme, url.raw_host, url.port)
        pool = self._origins.get(origin)
        if pool is None:
            pool = self._origins[origin] = _OriginPool()
        shard = self._pick(pool)
        shard.in_flight += 1
        try:
            response = await shard.transport.handle_async_request(request)
        except BaseException:
            self._release(pool, shard)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _ReleasingStream(response.stream, lambda: self._release(pool, shard))
        return response

    async def aclose(self) -> None:
        pools, self._origins = list(self._origins.values()), {}
        for pool in pools:
            for shard in pool.shards:
                await shard.transport.aclose()


def sharded_client(*, max_connections: int, timeout: float) -> httpx.AsyncClient:
    """The worker process's one client: ``max_connections`` per provider host."""
    return httpx.AsyncClient(
        transport=ShardedTransport(max_connections=max_connections), timeout=timeout
    )
