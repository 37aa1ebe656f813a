"""The worker's HTTP client: one connection per request in flight, reused, bounded, traced."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from shared.canonical import canonical_bytes
from tests.faux.conftest import AUTH, system_one_body
from worker.http.connection_pool import ShardedTransport, _OriginPool, sharded_client
from worker.testing.faux import FauxBehaviour, FauxServer

BODY = canonical_bytes(system_one_body())


@pytest.fixture
def slow_server() -> Iterator[FauxServer]:
    with FauxServer(behaviour=FauxBehaviour(latency_ms=100)) as server:
        yield server


def transport_of(client: httpx.AsyncClient) -> ShardedTransport:
    transport = client._transport
    assert isinstance(transport, ShardedTransport)
    return transport


async def post(client: httpx.AsyncClient, url: str, **kwargs: Any) -> httpx.Response:
    return await client.post(f"{url}/v1/systemone", content=BODY, headers=AUTH, **kwargs)


def test_concurrent_requests_each_get_a_connection_and_sequential_ones_reuse_it(
    slow_server: FauxServer,
) -> None:
    async def scenario() -> tuple[list[int], int, int]:
        async with sharded_client(max_connections=50, timeout=10) as client:
            answers = await asyncio.gather(*(post(client, slow_server.url) for _ in range(40)))
            opened = transport_of(client).connections()
            for _ in range(5):
                await post(client, slow_server.url)
            return [r.status_code for r in answers], opened, transport_of(client).connections()

    statuses, opened, after = asyncio.run(scenario())
    assert statuses == [200] * 40
    assert opened == 40  # 40 in flight at once need 40 connections...
    assert after == 40  # ...and later requests reuse them rather than open more
    assert slow_server.provider.total() == 45


def test_past_max_connections_requests_queue_and_all_finish(slow_server: FauxServer) -> None:
    async def scenario() -> tuple[list[int], int, float]:
        async with sharded_client(max_connections=4, timeout=10) as client:
            loop = asyncio.get_running_loop()
            started = loop.time()
            answers = await asyncio.gather(*(post(client, slow_server.url) for _ in range(12)))
            return [r.status_code for r in answers], transport_of(client).connections(), (
                loop.time() - started
            )

    statuses, opened, elapsed = asyncio.run(scenario())
    assert statuses == [200] * 12
    assert opened == 4
    assert elapsed >= 0.25  # 12 requests of 100 ms over 4 connections: at least 3 rounds


def test_a_pool_wait_past_its_timeout_is_a_pool_timeout(slow_server: FauxServer) -> None:
    async def scenario() -> list[BaseException | httpx.Response]:
        async with sharded_client(max_connections=1, timeout=10) as client:
            timeout = httpx.Timeout(10, pool=0.02)
            return await asyncio.gather(
                post(client, slow_server.url),
                post(client, slow_server.url, timeout=timeout),
                return_exceptions=True,
            )

    first, second = asyncio.run(scenario())
    assert isinstance(first, httpx.Response) and first.status_code == 200
    # PoolTimeout is what the providers' transport books as "never sent".
    assert isinstance(second, httpx.PoolTimeout)


def test_trace_events_reach_the_caller_and_origins_get_their_own_connections() -> None:
    events: list[str] = []

    async def trace(event: str, info: dict[str, Any]) -> None:
        events.append(event)

    async def scenario(a: str, b: str) -> int:
        async with sharded_client(max_connections=8, timeout=10) as client:
            await post(client, a, extensions={"trace": trace})
            await post(client, b)
            await post(client, a)
            return transport_of(client).connections()

    with FauxServer() as one, FauxServer() as two:
        opened = asyncio.run(scenario(one.url, two.url))
        assert (one.provider.total(), two.provider.total()) == (2, 1)
    assert opened == 2
    # The providers tell "still connecting" from "maybe sent" by these events.
    assert "connection.connect_tcp.started" in events
    assert "http11.send_request_headers.started" in events


def test_a_failed_request_gives_its_connection_back() -> None:
    async def scenario(url: str) -> tuple[int, int]:
        async with sharded_client(max_connections=2, timeout=10) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await post(client, url)
            again = await post(client, url)
            return again.status_code, transport_of(client).connections()

    behaviour = FauxBehaviour(mode="drop_after_read", fail_first=1)
    with FauxServer(behaviour=behaviour) as server:
        status, opened = asyncio.run(scenario(server.url))
    assert status == 200
    # The dropped connection's pool was handed back and reconnected, not leaked.
    assert opened == 1


def test_every_connection_shares_one_tls_context(slow_server: FauxServer) -> None:
    async def scenario() -> set[int]:
        async with sharded_client(max_connections=20, timeout=10) as client:
            await asyncio.gather(*(post(client, slow_server.url) for _ in range(20)))
            transport = transport_of(client)
            idle = [c for p in transport._origins.values() for c in p.idle]
            return {id(c._ssl_context) for c in idle} | {len(idle)}

    # Making a context loads the CA bundle (tens of ms): once per client, not per connection.
    contexts = asyncio.run(scenario())
    assert 20 in contexts and len(contexts) == 2


def test_a_waiter_gets_the_slot_of_a_connection_that_closed() -> None:
    # One connection; the server drops it after reading: the queued request must not wait
    # for a connection that will never come back, but open its own in the freed slot.
    async def scenario(url: str) -> tuple[list[Any], int]:
        async with sharded_client(max_connections=1, timeout=10) as client:
            answers = await asyncio.gather(
                post(client, url), post(client, url), post(client, url), return_exceptions=True
            )
            return answers, transport_of(client).connections()

    behaviour = FauxBehaviour(mode="drop_after_read", fail_first=1, latency_ms=50)
    with FauxServer(behaviour=behaviour) as server:
        answers, opened = asyncio.run(scenario(server.url))
    assert isinstance(answers[0], httpx.RemoteProtocolError)
    assert [a.status_code for a in answers[1:] if isinstance(a, httpx.Response)] == [200, 200]
    assert opened == 1


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def scenario(url: str) -> tuple[int, int]:
        transport = ShardedTransport(max_connections=4, keepalive_expiry=0.05)
        async with httpx.AsyncClient(transport=transport, timeout=10) as client:
            await post(client, url)
            await asyncio.sleep(0.15)  # past keepalive: the connection is dropped, not used
            again = await post(client, url)
            return again.status_code, transport.connections()

    with FauxServer() as server:
        status, opened = asyncio.run(scenario(server.url))
    assert status == 200 and opened == 1


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_https_goes_through_tls_and_reuses_the_connection(tmp_path: Path) -> None:
    # Every real provider is HTTPS: the asyncio backend's start_tls, verified against the
    # server's certificate, and the connection kept for the next request.
    cert, key = _self_signed(tmp_path)
    served: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            served.append(await reader.readexactly(length))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async def scenario() -> tuple[list[str], int, str | None]:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(cert, key)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client_ctx = ssl.create_default_context(cafile=str(cert))
        transport = ShardedTransport(max_connections=4, ssl_context=client_ctx)
        versions: list[str | None] = []

        async def trace(event: str, info: dict[str, Any]) -> None:
            if event == "connection.start_tls.complete":
                ssl_object = info["return_value"].get_extra_info("ssl_object")
                versions.append(ssl_object.version())

        async with server, httpx.AsyncClient(transport=transport, timeout=10) as client:
            url = f"https://localhost:{port}/v1"
            texts = [
                (await client.post(url, content=b"one", extensions={"trace": trace})).text,
                (await client.post(url, content=b"two")).text,
            ]
            with pytest.raises(httpx.ConnectError):  # a certificate not trusted: never sent
                untrusting = httpx.AsyncClient(
                    transport=ShardedTransport(max_connections=1), timeout=10
                )
                async with untrusting:
                    await untrusting.post(url, content=b"three")
            return texts, transport.connections(), versions[0] if versions else None

    texts, opened, version = asyncio.run(scenario())
    assert texts == ["ok", "ok"] and served == [b"one", b"two"]
    assert opened == 1
    assert version is not None and version.startswith("TLS")


def test_a_connection_the_server_closed_while_idle_is_never_sent_on() -> None:
    # A server (or a proxy) closing an idle keep-alive connection is routine. Sending the
    # next request on it would fail after the request may have left, and a decision
    # would be escalated as "maybe sent": the pool must see the close and connect anew.
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # no "Connection: close": the client believes it may reuse it

    async def scenario() -> list[str]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, sharded_client(max_connections=4, timeout=10) as client:
            texts = []
            for _ in range(3):
                response = await client.post(f"http://127.0.0.1:{port}/v1", content=b"x")
                texts.append(response.text)
                await asyncio.sleep(0.05)  # the close reaches the client while idle
            return texts

    assert asyncio.run(scenario()) == ["ok", "ok", "ok"]
    assert len(connections) == 3


def test_a_slot_handed_to_a_request_that_stopped_waiting_is_not_lost() -> None:
    # A connection closes and its slot goes to the first waiter just as that waiter is
    # cancelled (or its pool timeout ends): the slot must come free, not stay counted for
    # a connection nobody opens, which with one connection would stall every request.
    async def scenario() -> int:
        transport = ShardedTransport(max_connections=1)
        pool = _OriginPool(httpcore.Origin(b"http", b"127.0.0.1", 9))
        pool.open = 1  # the one connection, in flight
        waiting = asyncio.create_task(transport._acquire(pool, 10))
        await asyncio.sleep(0)
        assert len(pool.waiting) == 1
        pool.open -= 1  # the in-flight connection closed: _give_back discarded it...
        transport._hand_on(pool, None)  # ...and handed its slot to the waiter
        waiting.cancel()  # which stops waiting in the same turn of the loop
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return pool.open

    assert asyncio.run(scenario()) == 0
