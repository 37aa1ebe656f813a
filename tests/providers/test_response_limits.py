"""What a provider sends back, against real loopback sockets: a body over
``DECISIONS_MAX_RESPONSE_BYTES`` (plain, declared, or a decompression bomb) is refused as
``invalid_response`` without being held in memory and without a second send; and a cookie a
response sets never rides on a later request (another key's, on the worker's one client)."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.settings import Settings
from worker.http.body import ResponseTooLarge, read_body, read_prefix
from worker.http.connection_pool import sharded_client
from worker.providers import (
    AuthSpec,
    OutboundRequest,
    TransportPolicy,
    UnknownCost,
    send_never_replay,
)

from .loopback import LoopbackServer, Reply

KEY_A, KEY_B = "LIMITS_TEST_KEY_A", "LIMITS_TEST_KEY_B"
LIMIT = 2**20
POLICY = TransportPolicy(timeout_s=5.0, max_attempts=3, backoff_base_s=0.01,
                         max_response_bytes=LIMIT)


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_A, "sk-team-a")
    monkeypatch.setenv(KEY_B, "sk-team-b")


async def _send(client: httpx.AsyncClient, url: str, key: str = KEY_A) -> bytes:
    response = await send_never_replay(
        client,
        OutboundRequest(
            "POST", url + "/v1/decide", b'{"q":1}', {"Content-Type": "application/json"}
        ),
        provider="loop",
        deadline=datetime.now(UTC) + timedelta(seconds=10),
        auth=AuthSpec(key),
        policy=POLICY,
        unknown_cost=UnknownCost(0.002, "estimate"),
    )
    return response.body


async def _refused(reply: Reply) -> tuple[DecisionProviderError, LoopbackServer]:
    async with LoopbackServer(reply) as server, sharded_client(
        max_connections=4, timeout=5
    ) as client:
        with pytest.raises(DecisionProviderError) as info:
            await _send(client, server.url)
    return info.value, server


def _assert_processed_not_resent(error: DecisionProviderError, server: LoopbackServer) -> None:
    assert error.code == "invalid_response"
    assert "DECISIONS_MAX_RESPONSE_BYTES" in str(error)
    assert error.cost_usd == 0.002  # processed: its cost may be owed
    assert server.requests == 1  # and never sent again


async def test_a_body_over_the_limit_is_refused_and_not_sent_again() -> None:
    error, server = await _refused(Reply(body=b"x" * (LIMIT + 1)))
    _assert_processed_not_resent(error, server)


@pytest.mark.parametrize(
    ("status", "headers", "code"),
    [
        (500, {}, "outcome_unknown"),
        (429, {}, "rate_limited"),
        (401, {}, "auth"),
        (500, {"Content-Encoding": "gzip"}, "outcome_unknown"),
    ],
)
async def test_an_error_with_a_huge_body_keeps_its_status_s_meaning(
    status: int, headers: dict[str, str], code: str
) -> None:
    page = b"<html>" + b"x" * (LIMIT + 1)
    body = gzip.compress(page) if headers else page
    error, server = await _refused(Reply(status=status, headers=headers, body=body))
    assert error.code == code and server.requests == 1


async def test_a_body_at_the_limit_is_read() -> None:
    body = b"[" + b"1," * ((LIMIT - 3) // 2) + b"1]"
    async with LoopbackServer(Reply(body=body)) as server, sharded_client(
        max_connections=4, timeout=5
    ) as client:
        assert await _send(client, server.url) == body


async def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip.compress(b"\0" * (200 * 2**20))  # 200 MiB in about 200 KB
    tracemalloc.start()
    try:
        error, server = await _refused(Reply(headers={"Content-Encoding": "gzip"}, body=bomb))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _assert_processed_not_resent(error, server)
    # The bomb's bytes and the limit's worth of output, not 200 MiB (httpx alone: 200 MiB).
    assert peak < 8 * LIMIT


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as the standard says
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw, as some servers send it
        ("identity", lambda data: data),
        ("br", lambda data: data),  # not one httpx decodes: passed through, as httpx does
    ],
)
async def test_encoded_bodies_under_the_limit_are_decoded(coding: str, encode: object) -> None:
    body = b'{"answers": {"q": "yes"}}' * 1000
    reply = Reply(headers={"Content-Encoding": coding}, body=encode(body))  # type: ignore[operator]
    async with LoopbackServer(reply) as server, sharded_client(
        max_connections=4, timeout=5
    ) as client:
        assert await _send(client, server.url) == body


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_corrupt_body_is_invalid_response(coding: str) -> None:
    reply = Reply(headers={"Content-Encoding": coding}, body=b"\x1f\x8bnot compressed")
    error, server = await _refused(reply)
    assert error.code == "invalid_response" and server.requests == 1
    assert "could not be decoded" in str(error)


async def test_the_connection_of_a_refused_body_is_not_reused() -> None:
    class _Stream(httpx.AsyncByteStream):
        closed = False

        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield b"x" * 100
            yield b"x" * 100

        async def aclose(self) -> None:
            _Stream.closed = True

    response = httpx.Response(200, stream=_Stream(), request=httpx.Request("GET", "http://h/"))
    with pytest.raises(ResponseTooLarge):
        await read_body(response, 150)
    assert _Stream.closed


def test_the_setting_reaches_every_provider_policy() -> None:
    settings = Settings(max_response_bytes=12345)
    assert TransportPolicy.from_settings(settings).max_response_bytes == 12345


async def test_a_cookie_set_for_one_key_is_not_sent_with_another() -> None:
    reply = Reply(headers={"Set-Cookie": "affinity=team-a; Path=/"})
    async with LoopbackServer(reply) as server, sharded_client(
        max_connections=4, timeout=5
    ) as client:
        await _send(client, server.url, KEY_A)
        await _send(client, server.url, KEY_B)
        assert len(client.cookies) == 0
    assert server.requests == 2
    assert b"affinity" not in server.heads[1].lower()
    assert b"cookie" not in server.heads[1].lower()


async def test_a_body_a_transport_built_in_memory_is_held_to_the_limit_too() -> None:
    big = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * (LIMIT + 1)))
    async with httpx.AsyncClient(transport=big) as client:
        with pytest.raises(DecisionProviderError) as info:
            await _send(client, "http://provider.test")
    assert info.value.code == "invalid_response"


@pytest.mark.parametrize("coding", ["identity", "gzip"])
async def test_a_prefix_is_the_body_s_first_bytes_decoded(coding: str) -> None:
    page = bytes(range(256)) * 4096  # 1 MiB
    raw = gzip.compress(page) if coding == "gzip" else page

    class _Chunks(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for i in range(0, len(raw), 65_536):
                yield raw[i : i + 65_536]

    def response() -> httpx.Response:
        return httpx.Response(
            200, headers={"Content-Encoding": coding}, stream=_Chunks(),
            request=httpx.Request("GET", "http://h/"),
        )

    assert await read_prefix(response(), 100_000) == page[:100_000]
    assert await read_prefix(response(), 2 * len(page)) == page
