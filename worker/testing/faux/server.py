"""The faux as a real HTTP/1.1 server: asyncio and h11, keep-alive, many connections.

It plays every ``FauxProvider`` outcome on a real socket, connection-level ones included, so
that providers meet the exact httpx exceptions of a misbehaving host. ``drop_before_read``
closes as soon as a decision request's head is in, its body unread: that lets the control
endpoints (``/_faux/...``) answer on new connections whatever the behaviour, and a client
sees the same ``RemoteProtocolError`` as for a close at accept. The hot path logs
nothing and allocates little: a benchmark measures the worker, not the faux.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import signal
import socket
import struct
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import parse_qsl, unquote

import h11

from . import wire
from .app import FauxProvider
from .behaviour import FauxBehaviour
from .outcome import FauxDrop, FauxResponse

__all__ = ["FauxServer", "run_forever", "serve"]

_READ_SIZE: Final = 256 * 1024
#: Bodies past this are not even buffered (the handler answers 413 above MAX_BODY_BYTES).
_BODY_CAP: Final = wire.MAX_BODY_BYTES + 1024 * 1024
#: How long an orderly close waits for the client to hang up.
_LINGER_S: Final = 5.0
_BACKLOG: Final = 2048
_BAD_REQUEST: Final = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_TOO_LARGE: Final = (
    b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)
_LINGER_ZERO: Final = struct.pack("ii", 1, 0)


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


class _TooLarge(Exception):
    pass


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(_READ_SIZE))


async def _read_head(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next request's head, or None once the client has hung up."""
    event = await _next_event(conn, reader)
    # Anything else is ConnectionClosed (PAUSED cannot follow a finished cycle).
    return event if isinstance(event, h11.Request) else None


async def _read_body(conn: h11.Connection, reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await _next_event(conn, reader)
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > _BODY_CAP:
                raise _TooLarge
            chunks.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(chunks)
        else:
            raise h11.RemoteProtocolError("connection closed in the middle of a request body")


def _split_target(target: bytes) -> tuple[str, dict[str, str]]:
    raw_path, _, raw_query = target.decode("latin-1").partition("?")
    return unquote(raw_path), dict(parse_qsl(raw_query, keep_blank_values=True))


async def _close_orderly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """FIN now, then discard whatever the client still sends until it hangs up.

    Closing a socket that holds unread bytes makes the kernel answer with an RST, which a
    client sees as a reset (``ReadError``) rather than the close these modes promise
    (``RemoteProtocolError``); so the bytes are drained, never parsed.
    """
    try:
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(_LINGER_S):
            while await reader.read(_READ_SIZE):
                pass
    except (TimeoutError, OSError):
        pass
    finally:
        writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    writer.transport.abort()


def _encode(conn: h11.Connection, response: FauxResponse) -> bytes:
    headers = [(name, value) for name, value in response.headers.items()]
    headers.append(("content-length", str(len(response.body))))
    head = conn.send(
        h11.Response(status_code=response.status, headers=headers, reason=_reason(response.status))
    )
    data = conn.send(h11.Data(data=response.body)) if response.body else b""
    end = conn.send(h11.EndOfMessage())
    return (head or b"") + (data or b"") + (end or b"")


class _Running:
    """A bound server and its live connections, so that stopping closes them all."""

    def __init__(self, provider: FauxProvider) -> None:
        self.provider = provider
        self.server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(
            self._connection, host, port, backlog=_BACKLOG, reuse_address=True
        )

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._converse(reader, writer)
        except (OSError, asyncio.CancelledError):
            # Cancellation is only ever our own stop(); not re-raised because Python 3.11's
            # start_server callback calls task.exception() on a cancelled task and logs.
            writer.transport.abort()
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            if not writer.is_closing():
                writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        provider = self.provider
        conn = h11.Connection(h11.SERVER)
        while True:
            try:
                request = await _read_head(conn, reader)
                if request is None:
                    return
                method = request.method.decode("ascii")
                path, query = _split_target(request.target)
                headers = {
                    name.decode("latin-1"): value.decode("latin-1")
                    for name, value in request.headers
                }
                admission = provider.admit(method, path, headers)
                if admission is not None and admission.dropped:
                    await _close_orderly(reader, writer)
                    return
                body = await _read_body(conn, reader)
            except h11.RemoteProtocolError:
                writer.write(_BAD_REQUEST)
                return
            except _TooLarge:
                writer.write(_TOO_LARGE)
                return
            outcome = await provider.handle_async(method, path, query, headers, body, admission)
            if isinstance(outcome, FauxDrop):
                if outcome.reset:
                    _reset(writer)
                else:
                    await _close_orderly(reader, writer)
                return
            writer.write(_encode(conn, outcome))
            await writer.drain()
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()


async def serve(provider: FauxProvider, host: str, port: int) -> None:
    """Serve ``provider`` on ``host:port`` until cancelled."""
    running = _Running(provider)
    await running.start(host, port)
    try:
        await asyncio.Event().wait()
    finally:
        await running.close()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class FauxServer:
    """The faux on a free loopback port, in a background thread: ``with FauxServer() as s``."""

    def __init__(
        self,
        provider: FauxProvider | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        behaviour: FauxBehaviour | None = None,
    ) -> None:
        self.provider = provider or FauxProvider(behaviour)
        self.host = host
        self._requested_port = port
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the faux server is not running")
        return self._port

    @property
    def url(self) -> str:
        return _url(self.host, self.port)

    def start(self) -> FauxServer:
        if self._thread is not None:
            raise RuntimeError("the faux server is already started")
        self._thread = threading.Thread(target=self._run, name="faux-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=10)
        self._thread = None
        self._port = None

    def __enter__(self) -> FauxServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced to start(), which is waiting
            self._error = exc
        finally:
            self._ready.set()
            loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        running = _Running(self.provider)
        await running.start(self.host, self._requested_port)
        self._port = running.port
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await running.close()


async def _serve_until_signalled(provider: FauxProvider, host: str, port: int) -> None:
    running = _Running(provider)
    await running.start(host, port)
    print(f"faux provider listening on {_url(host, running.port)}", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await running.close()


def run_forever(
    host: str,
    port: int,
    behaviour: FauxBehaviour | None = None,
    *,
    replay: Path | None = None,
) -> None:
    """Serve a new faux provider until SIGTERM or SIGINT (``decisions faux serve``)."""
    provider = FauxProvider(behaviour, replay=replay)
    try:
        asyncio.run(_serve_until_signalled(provider, host, port))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        sys.stderr.flush()
