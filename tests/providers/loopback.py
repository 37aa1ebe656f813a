"""Real sockets on 127.0.0.1 that misbehave at one phase of an HTTP exchange each.

``LoopbackServer`` runs on the test's own event loop. Each *connection* takes the next
action of its script (the last one repeats): close at once, read the request and close,
read it and reset (RST), or answer (after an optional delay) with a status, headers and a
body. ``requests`` counts requests read in full, ``connections`` connections accepted; a
test asserts them to pin what was sent.

``refusing_port()`` is a port nobody listens on; ``full_backlog()`` is a listener whose
accept queue is full, so a new connection hangs in the SYN phase (a connect timeout);
``FailingHandshake`` a listener on which every TLS handshake fails; ``UNRESOLVABLE`` a host
name that never resolves (``.invalid``, RFC 6761).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Self

#: Never resolves (RFC 6761 reserves ``.invalid``): a DNS failure without a network.
UNRESOLVABLE = "decisions-never-resolves.invalid"

Drop = Literal["close_on_accept", "close_after_read", "reset_after_read"]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | dict[str, Any] = b"{}"
    delay_s: float = 0.0

    def encode(self) -> bytes:
        body = self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()
        head = [f"HTTP/1.1 {self.status} X", f"Content-Length: {len(body)}", "Connection: close"]
        if "content-type" not in {k.lower() for k in self.headers}:
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in self.headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body


Action = Drop | Reply


class LoopbackServer:
    def __init__(self, *script: Action) -> None:
        self.script: list[Action] = list(script) or [Reply()]
        self.requests = 0
        self.connections = 0
        self.bodies: list[bytes] = []
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    def _next(self) -> Action:
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    async def _read_request(self, reader: asyncio.StreamReader) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        body = await reader.readexactly(length) if length else b""
        self.heads.append(head)
        self.bodies.append(body)
        self.requests += 1
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        action = self._next()
        try:
            if action == "close_on_accept":
                return
            if not await self._read_request(reader):
                return
            if action == "close_after_read":
                return
            if action == "reset_after_read":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            assert isinstance(action, Reply)
            if action.delay_s:
                await asyncio.sleep(action.delay_s)
            writer.write(action.encode())
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def refusing_port() -> int:
    """A loopback port that nobody listens on (bound, read, closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def full_backlog() -> Iterator[int]:
    """A listener that never accepts, its queue filled: new connections hang unanswered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


class FailingHandshake:
    """A loopback listener on which every TLS handshake fails; nothing of HTTP gets through.

    ``garbage``: a plain TCP server that reads the ClientHello and answers bytes that are not
    TLS (an HTTP error line), then closes. ``untrusted``: a real TLS server whose certificate
    comes from a CA the client does not trust (``trustme``), so the client aborts the
    handshake. ``received`` holds every byte a connection delivered to the server's
    application (for ``untrusted``, none: a handshake that fails delivers nothing).
    """

    def __init__(self, mode: Literal["garbage", "untrusted"]) -> None:
        self.mode = mode
        self.connections = 0
        self.received = b""
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FailingHandshake:
        context = None
        if self.mode == "untrusted":
            import trustme

            ca = trustme.CA()
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ca.issue_cert("127.0.0.1").configure_cert(context)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                self.received += await asyncio.wait_for(reader.read(65536), 2)
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
