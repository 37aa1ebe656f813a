"""httpcore's network backend on plain asyncio streams, for the worker's HTTP client.

httpcore reaches sockets through anyio by default. Under the worker's load that layer is
the single largest cost of a request after HTTP itself: every read and write opens a cancel
scope (``anyio.fail_after``), and every check of an idle connection builds anyio's whole
attribute table to find the socket (measured with py-spy in the bench: 13% of the worker's
CPU). httpcore documents ``AsyncNetworkBackend`` as the place to plug in another; this one
keeps its contract, in particular its exceptions, which the providers' transport reads to
tell "never sent" (``ConnectError``, ``ConnectTimeout``) from "maybe sent" (``ReadError``,
``WriteError``, their timeouts).
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
from httpcore import SOCKET_OPTION

__all__ = ["AsyncioBackend", "AsyncioStream"]

#: StreamReader's buffer limit; a response larger than this is read in several chunks.
_READ_LIMIT = 2**16


@contextmanager
def _mapped(timeout_error: type[Exception], os_error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:
        raise timeout_error(str(exc) or type(exc).__name__) from exc
    except (OSError, EOFError, ssl.SSLError) as exc:
        raise os_error(str(exc) or type(exc).__name__) from exc


def _readable(sock: socket.socket | None) -> bool:
    """Whether reading ``sock`` would return at once (data, or its end): a socket gone is."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection's reader and writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError):
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError):
            if self._writer.is_closing():
                raise ConnectionResetError("the connection is closed")
            self._writer.write(buffer)
            async with asyncio.timeout(timeout):
                await self._writer.drain()

    async def aclose(self) -> None:
        transport = self._writer.transport
        transport.close()
        # One turn of the loop to flush what is buffered, then nothing more to wait for:
        # a closing peer must not hold up a worker that is letting go of its connection.
        await asyncio.sleep(0)
        transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            try:
                async with asyncio.timeout(timeout):
                    await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
            except BaseException:
                await self.aclose()
                raise
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._writer.get_extra_info("socket")
        if info == "is_readable":
            # asyncio reads eagerly: a peer's close is usually seen already; if not, the
            # socket says so (its end of file stays readable). Bytes a peer sent on an idle
            # connection (a stray response: a 408, a 429, a retransmitted answer) are in the
            # reader's buffer already, where neither looks (found by an attack: the next
            # request read them as its answer, and a stray 429 made a request the host had
            # processed go out again). asyncio has no public way to ask, so its buffer is
            # read; where it is not found, the connection counts as readable: not reused.
            buffered = getattr(self._reader, "_buffer", None)
            if buffered is None or buffered or self._reader.at_eof():
                return True
            if self._writer.is_closing():
                return True
            return _readable(self._writer.get_extra_info("socket"))
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """TCP and Unix connections on the running asyncio loop."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    local_addr=None if local_address is None else (local_address, 0),
                    limit=_READ_LIMIT,
                )
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path, limit=_READ_LIMIT)
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _apply(writer: asyncio.StreamWriter, options: Iterable[SOCKET_OPTION] | None) -> None:
    sock: socket.socket | None = writer.get_extra_info("socket")
    for option in options or ():
        if sock is not None:
            sock.setsockopt(*option)
