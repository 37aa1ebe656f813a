"""The replay policy against real loopback sockets that fail at each phase.

Two layers: what httpx itself raises at each phase (pinned, so an upgrade that changes it
fails here first), and what the transport makes of it, with the requests the server read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.outcomes import call_status
from worker.http.connection_pool import sharded_client
from worker.providers import (
    AuthSpec,
    DecisionRequest,
    OutboundRequest,
    ParallelProvider,
    TransportPolicy,
    UnknownCost,
    send_never_replay,
    was_cancelled,
)
from worker.providers.latency import MIN_SAMPLES, RecentLatency

from .loopback import (
    UNRESOLVABLE,
    FailingHandshake,
    LoopbackServer,
    Reply,
    full_backlog,
    refusing_port,
)
from .support import STATE, questions

KEY_VAR = "LOOPBACK_TEST_KEY"
POLICY = TransportPolicy(timeout_s=1.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)
COST = UnknownCost(0.001, "estimate")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-loopback")


def _deadline(seconds: float = 10.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def _send(
    url: str,
    *,
    seconds: float = 10.0,
    policy: TransportPolicy = POLICY,
    client: httpx.AsyncClient | None = None,
    latency: RecentLatency | None = None,
) -> httpx.Headers:
    own = client is None
    client = client or httpx.AsyncClient()
    try:
        response = await send_never_replay(
            client,
            OutboundRequest(
                "POST", url + "/v1/decide", b'{"q":1}', {"Content-Type": "application/json"}
            ),
            provider="loop",
            deadline=_deadline(seconds),
            auth=AuthSpec(KEY_VAR),
            policy=policy,
            unknown_cost=COST,
            latency=latency,
        )
        return response.headers
    finally:
        if own:
            await client.aclose()


async def _fails(url: str, **kwargs: object) -> DecisionProviderError:
    with pytest.raises(DecisionProviderError) as info:
        await _send(url, **kwargs)  # type: ignore[arg-type]
    return info.value


# --- what httpx raises, phase by phase ----------------------------------------------------


async def _raw(url: str, timeout: float = 0.5) -> BaseException:
    async with httpx.AsyncClient() as client:
        try:
            await client.post(url, content=b"x", timeout=httpx.Timeout(timeout))
        except Exception as exc:
            return exc
    raise AssertionError("the request succeeded")


async def test_httpx_raises_connect_error_when_refused() -> None:
    assert type(await _raw(f"http://127.0.0.1:{refusing_port()}/")) is httpx.ConnectError


async def test_httpx_raises_connect_timeout_on_a_full_backlog() -> None:
    with full_backlog() as port:
        assert type(await _raw(f"http://127.0.0.1:{port}/", 0.3)) is httpx.ConnectTimeout


@pytest.mark.parametrize(
    ("action", "raised"),
    [
        # A close with the request's bytes already unread in the server's buffer goes out
        # as an RST (ReadError); one before they arrive as a FIN (RemoteProtocolError).
        # Which one is a race; both are "possibly sent".
        ("close_on_accept", (httpx.RemoteProtocolError, httpx.ReadError)),
        ("close_after_read", (httpx.RemoteProtocolError,)),
        ("reset_after_read", (httpx.ReadError,)),
    ],
)
async def test_httpx_raises_per_connection_phase(action: str, raised: tuple[type, ...]) -> None:
    async with LoopbackServer(action) as server:  # type: ignore[arg-type]
        assert type(await _raw(server.url)) in raised


async def test_httpx_raises_read_timeout_on_a_late_answer() -> None:
    async with LoopbackServer(Reply(delay_s=2)) as server:
        assert type(await _raw(server.url, 0.2)) is httpx.ReadTimeout


async def test_httpx_raises_pool_timeout_waiting_for_the_only_connection() -> None:
    async with LoopbackServer(Reply(delay_s=1)) as server:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(limits=limits) as client:
            blocker = asyncio.create_task(client.post(server.url, content=b"x"))
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.PoolTimeout):
                await client.post(server.url, content=b"x", timeout=httpx.Timeout(5, pool=0.1))
            await blocker


@asynccontextmanager
async def _client(kind: str) -> AsyncIterator[httpx.AsyncClient]:
    """httpx's own client, or the worker's (its pool on the asyncio network backend)."""
    client = httpx.AsyncClient() if kind == "httpx" else sharded_client(
        max_connections=4, timeout=5
    )
    async with client:
        yield client


CLIENT_KINDS = ["httpx", "worker"]


@pytest.mark.parametrize("kind", CLIENT_KINDS)
async def test_httpx_raises_connect_error_for_a_name_that_never_resolves(kind: str) -> None:
    async with _client(kind) as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(f"https://{UNRESOLVABLE}/", content=b"x", timeout=5)


@pytest.mark.parametrize("mode", ["garbage", "untrusted"])
@pytest.mark.parametrize("kind", CLIENT_KINDS)
async def test_httpx_raises_connect_error_for_a_failed_tls_handshake(kind: str, mode: str) -> None:
    async with FailingHandshake(mode) as server, _client(kind) as client:  # type: ignore[arg-type]
        with pytest.raises(httpx.ConnectError):
            await client.post(server.url, content=b"x", timeout=5)


# --- what the transport makes of each phase -----------------------------------------------


def _assert_never_sent(exc: DecisionProviderError, caplog: pytest.LogCaptureFixture) -> None:
    """Retried with backoff up to the attempts, then ``connection``, booked ``not_sent``."""
    assert exc.code == "connection" and exc.attempts == POLICY.max_attempts
    assert "nothing was sent" in str(exc)
    assert exc.cost_usd is None and call_status(exc) == "not_sent"
    waits = [r for r in caplog.records if "never sent" in r.getMessage()]
    assert len(waits) == POLICY.max_attempts - 1, "a backoff before every retry"


@pytest.mark.parametrize("kind", CLIENT_KINDS)
async def test_dns_failure_is_retried_then_connection(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="worker.providers.transport")
    async with _client(kind) as client:
        exc = await _fails(f"https://{UNRESOLVABLE}", client=client)
    _assert_never_sent(exc, caplog)


@pytest.mark.parametrize("mode", ["garbage", "untrusted"])
@pytest.mark.parametrize("kind", CLIENT_KINDS)
async def test_failed_tls_handshake_is_retried_then_connection(
    kind: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="worker.providers.transport")
    async with FailingHandshake(mode) as server, _client(kind) as client:  # type: ignore[arg-type]
        exc = await _fails(server.url, client=client)
    _assert_never_sent(exc, caplog)
    # Nothing of the request (its path, its key) ever reached the server.
    assert b"/v1/decide" not in server.received and b"sk-loopback" not in server.received
    if mode == "garbage":
        assert server.connections == POLICY.max_attempts


async def test_a_provider_never_reaching_its_host_books_not_sent(keys: str) -> None:
    async with httpx.AsyncClient() as http:
        provider = ParallelProvider(http=http, base_url=f"https://{UNRESOLVABLE}", policy=POLICY)
        with pytest.raises(DecisionProviderError) as info:
            await provider.decide(DecisionRequest(state=STATE, questions=questions()), _deadline())
    error = info.value
    assert error.code == "connection" and error.attempts == POLICY.max_attempts
    assert error.receipt is not None and error.receipt.status == "not_sent"
    assert error.receipt.cost_usd is None


async def test_refused_connection_is_retried_then_connection() -> None:
    exc = await _fails(f"http://127.0.0.1:{refusing_port()}")
    assert exc.code == "connection" and exc.attempts == 3
    assert exc.cost_usd is None


async def test_connect_timeout_is_retried_then_connection() -> None:
    policy = TransportPolicy(timeout_s=0.2, max_attempts=2, backoff_base_s=0.01)
    with full_backlog() as port:
        exc = await _fails(f"http://127.0.0.1:{port}", policy=policy)
    assert exc.code == "connection" and exc.attempts == 2


async def test_deadline_cutting_a_connect_is_timeout() -> None:
    with full_backlog() as port:
        exc = await _fails(f"http://127.0.0.1:{port}", seconds=0.3)
    assert exc.code == "timeout" and exc.attempts == 1


async def test_cancel_while_connecting_is_aborted_nothing_sent() -> None:
    with full_backlog() as port:
        task = asyncio.create_task(_send(f"http://127.0.0.1:{port}"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(DecisionProviderError) as info:
            await task
    assert info.value.code == "aborted" and was_cancelled(info.value)


async def test_pool_timeout_is_never_sent_and_retried() -> None:
    # The blocker holds the one connection for 3 s, so our first attempt's 2 s pool wait
    # times out (never sent) and a later one gets the connection. The timeout is also the
    # read timeout of the attempt that is sent: 2 s, so that a loaded machine's slow answer
    # is not mistaken for an unknown outcome.
    async with LoopbackServer(Reply(delay_s=3.0), Reply(body={"ok": True})) as server:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(limits=limits) as client:
            blocker = asyncio.create_task(client.post(server.url, content=b"x", timeout=10))
            while server.requests == 0:
                await asyncio.sleep(0.01)
            policy = TransportPolicy(timeout_s=2.0, max_attempts=5, backoff_base_s=0.2)
            await _send(server.url, client=client, policy=policy)
            await blocker
    # The blocker and ours: ours went out once, after the pool freed up.
    assert server.requests == 2


@pytest.mark.parametrize("action", ["close_on_accept", "close_after_read", "reset_after_read"])
async def test_connection_lost_after_connecting_is_unknown_never_resent(action: str) -> None:
    async with LoopbackServer(action, Reply()) as server:  # type: ignore[arg-type]
        exc = await _fails(server.url)
    assert exc.code == "outcome_unknown"
    assert server.connections == 1, "never sent again"
    assert server.requests == (0 if action == "close_on_accept" else 1)
    assert (exc.cost_usd, exc.cost_basis) == (0.001, "estimate")


async def test_late_answer_is_unknown() -> None:
    async with LoopbackServer(Reply(delay_s=3)) as server:
        exc = await _fails(server.url, policy=TransportPolicy(timeout_s=0.3))
    assert exc.code == "outcome_unknown" and server.requests == 1


async def test_deadline_in_flight_is_unknown() -> None:
    async with LoopbackServer(Reply(delay_s=3)) as server:
        exc = await _fails(server.url, seconds=0.3)
    assert exc.code == "outcome_unknown" and server.requests == 1
    assert "deadline" in str(exc)


@pytest.mark.parametrize("quantile", [0.5, 0.0])
async def test_less_time_left_than_answers_take_is_never_sent(quantile: float) -> None:
    """Answers 0.4 s away; a request with 0.2 s left would be cut off in flight (unknown,
    maybe paid): it is not sent, and fails as a deadline before a send does. With the floor
    turned off (quantile 0) it is sent, and cut off."""
    latency = RecentLatency(quantile)
    async with LoopbackServer(Reply(delay_s=0.4)) as server:
        for _ in range(MIN_SAMPLES):
            await _send(server.url, latency=latency)
        exc = await _fails(server.url, seconds=0.2, latency=latency)
        sent = server.requests
    if quantile:
        assert 0.4 <= latency.floor_s() < 1.0
        assert exc.code == "timeout" and call_status(exc) == "not_sent"
        assert "DECISIONS_SEND_FLOOR_QUANTILE" in str(exc) and exc.attempts == 0
        assert sent == MIN_SAMPLES, "never sent"
    else:
        assert latency.floor_s() == 0.0
        assert exc.code == "outcome_unknown" and sent == MIN_SAMPLES + 1


async def test_the_floor_counts_answers_only_and_starts_after_a_few() -> None:
    """Failed attempts teach nothing of an answer's time; before ``MIN_SAMPLES`` answers a
    request is sent however little time is left."""
    latency = RecentLatency()
    async with LoopbackServer(Reply(status=500)) as server:
        for _ in range(MIN_SAMPLES):
            assert (await _fails(server.url, latency=latency)).code == "outcome_unknown"
    assert latency.floor_s() == 0.0
    async with LoopbackServer(Reply(delay_s=0.4)) as server:
        for _ in range(MIN_SAMPLES - 1):
            await _send(server.url, latency=latency)
        exc = await _fails(server.url, seconds=0.2, latency=latency)
        assert exc.code == "outcome_unknown" and server.requests == MIN_SAMPLES


async def test_cancel_in_flight_is_unknown() -> None:
    async with LoopbackServer(Reply(delay_s=3)) as server:
        task = asyncio.create_task(_send(server.url))
        while server.requests == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(DecisionProviderError) as info:
            await task
    assert info.value.code == "outcome_unknown" and was_cancelled(info.value)
    assert server.requests == 1


@pytest.mark.parametrize(
    "retry_after",
    ["0", "1", None],
    ids=["seconds", "one-second", "http-date"],
)
async def test_429_with_retry_after_is_retried(retry_after: str | None) -> None:
    value = retry_after or format_datetime(datetime.now(UTC) + timedelta(seconds=1), usegmt=True)
    script = [Reply(429, {"Retry-After": value}), Reply(200, {"X-Ok": "1"})]
    async with LoopbackServer(*script) as server:
        headers = await _send(server.url)
    assert headers["x-ok"] == "1"
    assert server.requests == 2


async def test_429_without_retry_after_is_rate_limited() -> None:
    async with LoopbackServer(Reply(429), Reply()) as server:
        exc = await _fails(server.url)
    assert exc.code == "rate_limited" and server.requests == 1


async def test_429_past_the_deadline_is_rate_limited() -> None:
    async with LoopbackServer(Reply(429, {"Retry-After": "60"}), Reply()) as server:
        exc = await _fails(server.url, seconds=2)
    assert exc.code == "rate_limited" and exc.retry_after_s == 60
    assert server.requests == 1


@pytest.mark.parametrize("status", [408, 500, 502, 503, 504, 529])
async def test_408_and_5xx_are_unknown_never_resent(status: int) -> None:
    async with LoopbackServer(Reply(status, {"Retry-After": "0"}), Reply()) as server:
        exc = await _fails(server.url)
    assert exc.code == "outcome_unknown" and exc.status_code == status
    assert server.requests == 1
    assert (exc.cost_usd, exc.cost_basis) == (0.001, "estimate")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "auth"),
        (403, "auth"),
        (400, "invalid_request"),
        (413, "invalid_request"),
        (422, "invalid_request"),
        (402, "invalid_request"),
        (307, "configuration"),
    ],
)
async def test_definitive_statuses(status: int, code: str) -> None:
    body = {"error": {"message": "echo sk-loopback and the body"}}
    async with LoopbackServer(Reply(status, body=body), Reply()) as server:
        exc = await _fails(server.url)
    assert exc.code == code and server.requests == 1
    assert "echo" not in str(exc) and "sk-loopback" not in str(exc)


async def test_auth_header_is_sent_and_counted_once() -> None:
    async with LoopbackServer(Reply()) as server:
        await _send(server.url)
    assert b"authorization: Bearer sk-loopback" in server.heads[0].lower().replace(
        b"bearer", b"Bearer"
    )


async def test_deadline_leaving_no_room_for_the_backoff_is_timeout() -> None:
    policy = TransportPolicy(timeout_s=1.0, max_attempts=5, backoff_base_s=5.0, backoff_max_s=5.0)
    exc = await _fails(f"http://127.0.0.1:{refusing_port()}", seconds=1.0, policy=policy)
    assert exc.code == "timeout" and exc.attempts == 1
