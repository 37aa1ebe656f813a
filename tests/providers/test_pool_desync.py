"""A pooled keep-alive connection holding bytes the worker has not read never carries another
request (found by an attack).

Bytes a host sends past a response (a retransmitted answer, a stray 429, an unsolicited 408
on an idle connection) wait in the client's buffers: h11's, when they came in the same read
as the response, or asyncio's ``StreamReader``, when they came while the connection was idle.
Before, the pool (``worker.http.connection_pool``) handed such a connection to the next
request, which read them as its own response: every later job on it got the answer of the
one before, and a stray ``429 Retry-After`` made a request the host had processed go out
again. Real loopback servers of the test's own; the worker's own client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.providers.loopback import LoopbackServer
from worker.http.aio_network import AsyncioBackend, AsyncioStream
from worker.http.connection_pool import sharded_client
from worker.providers import (
    AuthSpec,
    DecisionRequest,
    OutboundRequest,
    SystemOneConfig,
    SystemOneProvider,
    TransportPolicy,
    TransportResponse,
    send_never_replay,
)

POLICY = TransportPolicy(timeout_s=2.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)
KEY_VAR = "DESYNC_TEST_KEY"


def _response(status: int, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}",
            "Content-Type: application/json", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class KeepAliveHost(LoopbackServer):
    """A keep-alive loopback host that processes every request it reads (``processed``)
    and answers each through ``answer(connection, n, body) -> bytes`` (what it writes);
    ``writers`` gets each connection's writer, for a test to write more on it."""

    def __init__(
        self,
        answer: Callable[[int, int, dict], Awaitable[bytes] | bytes],
        writers: list[asyncio.StreamWriter] | None = None,
    ) -> None:
        super().__init__()
        self.answer = answer
        self.writers = writers if writers is not None else []
        self.processed: list[dict] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.connections += 1
        connection, n = self.connections, 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = json.loads(await reader.readexactly(length))
                self.processed.append(body)
                n += 1
                out = self.answer(connection, n, body)
                if asyncio.iscoroutine(out):
                    out = await out
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
            pass
        finally:
            writer.close()


async def post_job(http: httpx.AsyncClient, host: KeepAliveHost, job: str) -> TransportResponse:
    """``{"job": job}`` to the host through the providers' transport (never replayed)."""
    return await send_never_replay(
        http,
        OutboundRequest("POST", host.url + "/v1/systemone", json.dumps({"job": job}).encode(), {}),
        provider="acme",
        deadline=datetime.now(UTC) + timedelta(seconds=10),
        auth=AuthSpec(KEY_VAR),
        policy=POLICY,
    )


def _answer_for(state: str) -> bytes:
    """The host's honest answer to one state: a noul that says which state it was about."""
    p = 0.9 if state.endswith("urgent") else 0.1
    answer = {"answers": {"u": {"type": "noul", "noul": p}}, "id": f"for:{state}"}
    return json.dumps(answer).encode()


def test_a_duplicated_response_never_becomes_another_job_s_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host answers the first request twice (a proxy's retransmission); each later job
    must still get its own answer, not the previous job's."""
    monkeypatch.setenv(KEY_VAR, "sk-desync")

    def answer(connection: int, n: int, body: dict) -> bytes:
        once = _response(200, _answer_for(body["state"]))
        return once + once if (connection, n) == (1, 1) else once

    async def scenario() -> list[tuple[str, str | None, float | None]]:
        got = []
        async with KeepAliveHost(answer) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            config = SystemOneConfig("acme", host.url, KEY_VAR, default_model="m")
            provider = SystemOneProvider(config, http=http, policy=POLICY)
            for state in ("job-0-urgent", "job-1-calm", "job-2-urgent", "job-3-calm"):
                result = await provider.decide(
                    DecisionRequest(state=state, questions={"u": {"type": "noul",
                                                                  "instructions": "urgent?"}}),
                    datetime.now(UTC) + timedelta(seconds=10),
                )
                got.append((state, result.receipt.decision_id, result.answers["u"].probability))
                await asyncio.sleep(0.05)
        return got

    got = asyncio.run(scenario())
    wrong = [(state, said) for state, said, _ in got if said != f"for:{state}"]
    assert wrong == [], f"jobs answered with another request's answer: {wrong}"


def test_a_stray_429_never_sends_a_processed_request_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After answering A the host writes one stray ``429 Retry-After: 0`` in the same write.
    Request B, sent on that connection, is read by the host and processed; the stale 429
    must not make the transport send B again. (httpx's own pool fails this one too: the
    stray bytes sit in h11's buffer, which no pool looks at before reusing a connection.)"""
    monkeypatch.setenv(KEY_VAR, "sk-desync")

    def answer(connection: int, n: int, body: dict) -> bytes:
        ok = _response(200, json.dumps({"answer_for": body["job"]}).encode())
        return ok + _response(429, b"", "Retry-After: 0") if (connection, n) == (1, 1) else ok

    async def scenario() -> tuple[list[dict], int]:
        async with KeepAliveHost(answer) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            attempts = 0
            for job in ("A", "B"):
                response = await post_job(http, host, job)
                attempts = response.attempts
                await asyncio.sleep(0.3)
            return host.processed, attempts

    processed, attempts = asyncio.run(scenario())
    sent_b = [p for p in processed if p["job"] == "B"]
    assert len(sent_b) == 1, f"B reached the host {len(sent_b)} times (attempts={attempts})"


def test_an_unsolicited_response_while_idle_retires_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host writes a ``429 Retry-After: 0`` on an idle keep-alive connection (some servers
    write a 408 before dropping one). The next request must go on a fresh connection, as
    httpx's own pool does (its backend sees the socket readable); the worker's backend looks
    only at the socket, which asyncio has already drained into its ``StreamReader``."""
    monkeypatch.setenv(KEY_VAR, "sk-desync")
    writers: list[asyncio.StreamWriter] = []

    def answer(connection: int, n: int, body: dict) -> bytes:
        return _response(200, json.dumps({"answer_for": body["job"]}).encode())

    async def scenario() -> list[dict]:
        async with KeepAliveHost(answer, writers) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            for job in ("A", "B"):
                await post_job(http, host, job)
                if job == "A":
                    await asyncio.sleep(0.1)
                    writers[0].write(_response(429, b"", "Retry-After: 0"))  # while idle
                    await writers[0].drain()
                    await asyncio.sleep(0.2)
            return host.processed

    processed = asyncio.run(scenario())
    assert [p["job"] for p in processed] == ["A", "B"], (
        f"B was sent {sum(p['job'] == 'B' for p in processed)} times"
    )


def test_a_connection_with_nothing_left_unread_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above retire a connection only for bytes left unread: an honest host's
    keep-alive connection carries every request (were httpcore's or asyncio's buffers not
    found, every connection would be retired: safe, but a connection a request)."""
    monkeypatch.setenv(KEY_VAR, "sk-desync")

    def answer(connection: int, n: int, body: dict) -> bytes:
        return _response(200, json.dumps({"answer_for": body["job"]}).encode())

    async def scenario() -> tuple[list[dict], int]:
        async with KeepAliveHost(answer) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            for job in ("A", "B", "C"):
                await post_job(http, host, job)
                await asyncio.sleep(0.05)
            return host.processed, host.connections

    processed, connections = asyncio.run(scenario())
    assert [p["job"] for p in processed] == ["A", "B", "C"]
    assert connections == 1


# A released connection given straight to a request waiting for one (the pool full: the normal
# state under load) is checked as one taken from the idle stack is (found by a second attack).
def test_a_stray_429_on_a_connection_handed_to_a_waiting_request_sends_nothing_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-desync")
    writers: list[asyncio.StreamWriter] = []
    order: list[str] = []

    async def answer(connection: int, n: int, body: dict) -> bytes:
        order.append(body["job"])
        if body["job"] == "A":
            async def stray() -> None:  # its own write, a moment after A's answer
                writers[0].write(_response(429, b"", "Retry-After: 0"))
                order.append("stray 429")

            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(stray()))
        else:
            await asyncio.sleep(0.05)  # B takes a while to process
        return _response(200, json.dumps({"answer_for": body["job"]}).encode())

    async def scenario() -> list[dict]:
        async with KeepAliveHost(answer, writers) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            a = asyncio.create_task(post_job(http, host, "A"))
            await asyncio.sleep(0)
            b = asyncio.create_task(post_job(http, host, "B"))  # waits for A's connection
            await asyncio.gather(a, b)
            return host.processed

    processed = asyncio.run(scenario())
    sent_b = [p for p in processed if p["job"] == "B"]
    assert len(sent_b) == 1, f"B reached the host {len(sent_b)} times ({order})"


def test_a_retransmitted_answer_never_answers_the_request_waiting_for_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host (a retransmitting proxy) writes A's answer twice, the copy in its own write:
    B, waiting for the connection, must get its own answer, not A's."""
    monkeypatch.setenv(KEY_VAR, "sk-desync")
    writers: list[asyncio.StreamWriter] = []

    async def answer(connection: int, n: int, body: dict) -> bytes:
        ok = _response(200, json.dumps({"answer_for": body["job"]}).encode())
        if body["job"] == "A":
            async def again() -> None:
                writers[0].write(ok)

            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(again()))
        else:
            await asyncio.sleep(0.05)
        return ok

    async def scenario() -> bytes:
        async with KeepAliveHost(answer, writers) as host, sharded_client(
            max_connections=1, timeout=5
        ) as http:
            a = asyncio.create_task(post_job(http, host, "A"))
            await asyncio.sleep(0)
            b = asyncio.create_task(post_job(http, host, "B"))
            _, got_b = await asyncio.gather(a, b)
            return got_b.body

    assert json.loads(asyncio.run(scenario())) == {"answer_for": "B"}


def test_connections_closed_under_load_never_take_the_pool_past_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by an attack: a released connection that was not reusable (stray bytes behind
    its answer) gave its slot to a waiting request only after its close was awaited, and a
    request arriving meanwhile saw the slot free too: 10 connections open at a limit of 8.
    Counted at the client: sockets opened and not yet closed."""
    live = 0
    most = 0
    connect, close = AsyncioBackend.connect_tcp, AsyncioStream.aclose

    async def counting_connect(self: AsyncioBackend, *args: Any, **kwargs: Any) -> Any:
        nonlocal live, most
        stream = await connect(self, *args, **kwargs)
        live += 1
        most = max(most, live)
        return stream

    async def counting_close(self: AsyncioStream) -> None:
        nonlocal live
        live -= 1
        await close(self)

    monkeypatch.setattr(AsyncioBackend, "connect_tcp", counting_connect)
    monkeypatch.setattr(AsyncioStream, "aclose", counting_close)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Each answer with a stray response behind it: the connection is not reusable, and
        # its close is awaited (a connection the server closed needs none).
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer + answer)
            await writer.drain()
            await reader.read()  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        try:
            async with sharded_client(max_connections=2, timeout=5) as http:

                async def one() -> None:
                    response = await http.get(url)
                    await response.aread()

                started = []
                for _ in range(300):  # a request arriving at every turn of the loop
                    started.append(asyncio.create_task(one()))
                    await asyncio.sleep(0)
                await asyncio.gather(*started)
        finally:
            server.close()

    asyncio.run(scenario())
    assert most <= 2, f"{most} connections open at once with a limit of 2"
