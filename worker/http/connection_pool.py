"""One ``httpx.AsyncClient`` for hundreds of requests in flight: an O(1) connection pool.

httpcore 1.0's ``AsyncConnectionPool`` walks all its connections on every request and every
release (``_assign_requests_to_connections``: quadratic in the connections, a ``poll()`` per
idle socket through ``has_expired``; encode/httpcore#1035, encode/httpx#3215), so one pool of
N connections costs O(N) or worse per request: measured here against the faux at 0 ms,
554 req/s with 10 connections and 289 with 300, against 1,343 and 1,209 from 1-connection
pools. Even one-connection pools cost a fifth of the worker's CPU in that bookkeeping, and
anyio (httpcore's default way to the socket) another eighth (py-spy, ``make bench``).

``ShardedTransport`` keeps, per origin, a stack of idle httpcore connections
(``httpcore.AsyncHTTPConnection``, on ``worker.http.aio_network``'s asyncio backend) and hands a
request the most recently used one in O(1), checking only that one for expiry. httpcore
still does every byte of HTTP/1.1 and emits its trace events (which the providers'
transport reads to tell "never sent" from "maybe sent"); httpcore's errors become httpx's,
as in ``httpx.AsyncHTTPTransport``. Past ``max_connections`` a request waits for a
connection, up to the request's pool timeout (``httpx.PoolTimeout``: never sent).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpcore
import httpx

from worker.http.aio_network import AsyncioBackend
from worker.http.cookies import DiscardingJar

__all__ = ["ShardedTransport", "drop_read_stream", "sharded_client"]

Origin = tuple[bytes, bytes, int]
_DEFAULT_PORTS = {b"http": 80, b"https": 443}

#: httpcore's exceptions and httpx's, most specific first (httpx.AsyncHTTPTransport's map).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


@dataclass
class _OriginPool:
    origin: httpcore.Origin
    idle: list[httpcore.AsyncHTTPConnection] = field(default_factory=list)
    #: Connections open or opening, idle ones included.
    open: int = 0
    waiting: deque[asyncio.Future[httpcore.AsyncHTTPConnection | None]] = field(
        default_factory=deque
    )


class _ReleasingStream(httpx.AsyncByteStream):
    """The response body; closing it (httpx always does) gives the connection back."""

    def __init__(self, inner: httpcore.Response, release: Callable[[], Awaitable[None]]) -> None:
        self._inner = inner
        self._release: Callable[[], Awaitable[None]] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for chunk in self._inner.aiter_stream():
                yield chunk

    async def aclose(self) -> None:
        try:
            with _as_httpx_errors():
                await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                await release()


class ShardedTransport(httpx.AsyncBaseTransport):
    """Up to ``max_connections`` httpcore connections per origin, the last used first."""

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
        self.keepalive_expiry = keepalive_expiry
        # One context for every connection: making one loads the CA bundle (measured:
        # ~20 ms each, 75% of the CPU of a run that opened 512 connections).
        self.ssl_context = ssl_context or httpx.create_ssl_context()
        self._backend = AsyncioBackend()
        self._origins: dict[Origin, _OriginPool] = {}
        self._closed = False

    def connections(self) -> int:
        """Connections open or opening, over every origin."""
        return sum(pool.open for pool in self._origins.values())

    # --- acquire and release ------------------------------------------------------------

    def _new(self, pool: _OriginPool, *, counted: bool = False) -> httpcore.AsyncHTTPConnection:
        if not counted:
            pool.open += 1
        return httpcore.AsyncHTTPConnection(
            origin=pool.origin,
            ssl_context=self.ssl_context,
            keepalive_expiry=self.keepalive_expiry,
            network_backend=self._backend,
        )

    async def _acquire(
        self, pool: _OriginPool, pool_timeout: float | None
    ) -> httpcore.AsyncHTTPConnection:
        while pool.idle:
            connection = pool.idle.pop()
            if connection.is_available() and not connection.has_expired():
                return connection
            await self._discard(pool, connection)
        if pool.open < self.max_connections:
            return self._new(pool)
        waiter: asyncio.Future[httpcore.AsyncHTTPConnection | None] = (
            asyncio.get_running_loop().create_future()
        )
        pool.waiting.append(waiter)
        try:
            async with asyncio.timeout(pool_timeout):
                handed = await waiter
        except BaseException as stopped:
            if waiter in pool.waiting:
                pool.waiting.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                # Handed a connection, or a free slot, just as the wait ended: pass it on.
                handed_late = waiter.result()
                if handed_late is None:
                    pool.open -= 1  # the slot counted for this request is free again
                self._hand_on(pool, handed_late)
            if isinstance(stopped, TimeoutError):
                raise httpx.PoolTimeout("no connection came free in the pool timeout") from None
            raise
        # None: a connection closed and left its slot (counted already) to this request.
        return handed if handed is not None else self._new(pool, counted=True)

    async def _give_back(
        self, pool: _OriginPool, connection: httpcore.AsyncHTTPConnection
    ) -> None:
        reusable = connection.is_idle() and not connection.is_closed() and not self._closed
        # Checked here, not only when a connection is taken from the idle stack: under load a
        # released connection goes straight to a waiting request (found by a second attack:
        # a stray response that came apart from the answer, in the socket or asyncio's
        # buffer, was read as the waiting request's).
        if reusable and not _holds_unread(connection) and not connection.has_expired():
            self._hand_on(pool, connection)
            return
        # Closed (the server said so, or the request failed) or not reusable: its slot goes
        # to the next waiter before the close is awaited, or a request arriving meanwhile saw
        # the slot free too and the pool went past its limit (found by an attack: 10
        # connections open at a limit of 8).
        pool.open -= 1
        self._hand_on(pool, None)
        await connection.aclose()

    def _hand_on(
        self, pool: _OriginPool, connection: httpcore.AsyncHTTPConnection | None
    ) -> None:
        """A connection (or, for None, a free slot) to the first live waiter, or to the
        idle stack (or back to the count)."""
        while pool.waiting:
            waiter = pool.waiting.popleft()
            if not waiter.done():
                if connection is None:
                    pool.open += 1  # the waiter opens a connection in the freed slot
                waiter.set_result(connection)
                return
        if connection is not None:
            pool.idle.append(connection)

    async def _discard(self, pool: _OriginPool, connection: httpcore.AsyncHTTPConnection) -> None:
        pool.open -= 1
        await connection.aclose()

    # --- httpx's transport API ----------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        port = url.port or _DEFAULT_PORTS.get(scheme, 80)
        key: Origin = (scheme, url.raw_host, port)
        pool = self._origins.get(key)
        if pool is None:
            pool = self._origins[key] = _OriginPool(httpcore.Origin(scheme, url.raw_host, port))
        timeouts = request.extensions.get("timeout", {})
        connection = await self._acquire(pool, timeouts.get("pool"))
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            with _as_httpx_errors():
                response = await connection.handle_async_request(core_request)
        except BaseException:
            await asyncio.shield(self._give_back(pool, connection))
            raise

        async def release() -> None:
            await self._give_back(pool, connection)

        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ReleasingStream(response, release),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        self._closed = True
        pools, self._origins = list(self._origins.values()), {}
        for pool in pools:
            idle, pool.idle = pool.idle, []
            for connection in idle:
                await self._discard(pool, connection)


def sharded_client(*, max_connections: int, timeout: float) -> httpx.AsyncClient:
    """The worker process's one client: ``max_connections`` per provider host, and no
    cookies kept between requests (``worker.http.cookies``)."""
    return httpx.AsyncClient(
        transport=ShardedTransport(max_connections=max_connections),
        timeout=timeout,
        cookies=DiscardingJar(),
    )


#: What a response's stream becomes once its body is read (``drop_read_stream``).
_READ = httpx.ByteStream(b"")


def drop_read_stream(response: httpx.Response) -> None:
    """Let refcounting free a response whose body ``send`` has read.

    httpx ties a response and its body stream in a reference cycle (the stream it binds
    holds the response): about 40 objects a request that only the cyclic collector frees,
    whose passes paused the whole worker 150 to 250 ms at a few hundred requests a second
    (``make bench``'s chunked p99 at half rate: 300 to 400 ms). The body is read already,
    so the stream is not needed; replacing it breaks the cycle."""
    response.stream = _READ


def _holds_unread(connection: httpcore.AsyncHTTPConnection) -> bool:
    """Whether the server sent more than the response just read, in the same reads: those
    bytes wait in h11's buffer, and the connection's next request would read them as its
    own response (found by an attack: a host that sent one answer twice shifted every later
    answer on the connection to the next job, and a stray 429 after an answer made the next
    request, which the host processed, go out again). Such a connection is closed, never
    reused; httpx's own pool reuses it. httpcore keeps its h11 state on private attributes;
    where they are not found (another httpcore), the connection is not reused: slower, never
    wrong (``tests/providers/test_pool_desync.py`` checks that connections are reused)."""
    state = getattr(getattr(connection, "_connection", None), "_h11_state", None)
    trailing = getattr(state, "trailing_data", None)
    if not isinstance(trailing, tuple):
        return True
    data, closed = trailing
    return bool(data) or bool(closed)
