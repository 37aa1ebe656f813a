"""Transport details that need no socket: Retry-After, the limiter hook, keys, backoff."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from shared.errors import DecisionProviderError
from worker.providers import (
    AuthSpec,
    Limiter,
    NoLimiter,
    OutboundRequest,
    TransportPolicy,
    parse_retry_after,
    read_key,
    send_never_replay,
)
from worker.providers.latency import HORIZON_S, MIN_SAMPLES, WINDOW, RecentLatency

NOW = datetime(2026, 10, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        ("-4", 0.0),
        (format_datetime(NOW + timedelta(seconds=7), usegmt=True), 7.0),
        (format_datetime(NOW - timedelta(seconds=7), usegmt=True), 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def test_read_key_by_name_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_KEY", " k1 ")
    assert read_key(AuthSpec("SOME_KEY"), "p") == "k1"
    monkeypatch.setenv("SOME_KEY", "k2")
    assert read_key(AuthSpec("SOME_KEY"), "p") == "k2"
    monkeypatch.delenv("SOME_KEY")
    with pytest.raises(DecisionProviderError) as info:
        read_key(AuthSpec("SOME_KEY"), "p")
    assert info.value.code == "configuration" and "SOME_KEY" in str(info.value)
    assert read_key(AuthSpec(None, fixed_key="placeholder"), "p") == "placeholder"


def test_the_send_floor_is_a_quantile_of_the_last_answers() -> None:
    latency = RecentLatency(0.5)
    for seconds in range(1, MIN_SAMPLES):
        latency.note(float(seconds))
    assert latency.floor_s() == 0.0  # too few to say
    latency.note(8.0)
    assert latency.floor_s() == 5.0  # the upper median of 1..8
    for _ in range(WINDOW):  # the provider got faster: the old answers leave the window
        latency.note(0.25)
    assert latency.floor_s() == 0.25
    assert RecentLatency(0.9).floor_s() == 0.0
    off = RecentLatency(0.0)
    for _ in range(WINDOW):
        off.note(3.0)
    assert off.floor_s() == 0.0
    with pytest.raises(ValueError, match="quantile"):
        RecentLatency(1.0)


def test_old_answers_stop_counting_so_a_slow_spell_cannot_stop_a_provider_for_good() -> None:
    # Answers 12 s away, then nothing: jobs of 10 s timeouts are refused (no answer can come
    # to lower the floor) only until those answers are HORIZON_S old.
    latency = RecentLatency()
    for i in range(WINDOW):
        latency.note(12.0, now=1000.0 + i * 0.1)
    assert latency.floor_s(now=1010.0) == 12.0
    assert latency.floor_s(now=1000.0 + HORIZON_S + 1) == 12.0  # the last few still count
    assert latency.floor_s(now=1010.0 + HORIZON_S) == 0.0
    for i in range(MIN_SAMPLES):  # the provider answers in 1 s again
        latency.note(1.0, now=1100.0 + i)
    assert latency.floor_s(now=1110.0) == 1.0


def test_backoff_is_bounded_and_grows() -> None:
    policy = TransportPolicy(backoff_base_s=0.2, backoff_max_s=1.0)
    for attempt, ceiling in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        for _ in range(20):
            assert ceiling / 2 <= policy.backoff_s(attempt) <= ceiling


class RecordingLimiter:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self._n = 0

    async def acquire(self, provider: str) -> object:
        self._n += 1
        self.events.append(("acquire", provider))
        return f"token-{self._n}"

    async def release(self, token: object) -> None:
        self.events.append(("release", token))

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        self.events.append(("retry_after", seconds))


async def test_limiter_is_asked_per_attempt_and_told_of_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("K", "k")
    replies = [httpx.Response(429, headers={"Retry-After": "0"}), httpx.Response(200)]
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: replies.pop(0)))
    limiter = RecordingLimiter()
    assert isinstance(limiter, Limiter) and isinstance(NoLimiter(), Limiter)
    response = await send_never_replay(
        http,
        OutboundRequest("POST", "http://x/", b"{}"),
        provider="p",
        deadline=datetime.now(UTC) + timedelta(seconds=5),
        auth=AuthSpec("K"),
        limiter=limiter,
    )
    assert response.attempts == 2
    assert limiter.events == [
        ("acquire", "p"),
        ("release", "token-1"),
        ("retry_after", 0.0),
        ("acquire", "p"),
        ("release", "token-2"),
    ]


async def test_limiter_wait_past_the_deadline_is_timeout_nothing_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    monkeypatch.setenv("K", "k")

    class Slow(RecordingLimiter):
        async def acquire(self, provider: str) -> object:
            await asyncio.sleep(5)
            return None

    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    with pytest.raises(DecisionProviderError) as info:
        await send_never_replay(
            http,
            OutboundRequest("POST", "http://x/", b"{}"),
            provider="p",
            deadline=datetime.now(UTC) + timedelta(seconds=0.2),
            auth=AuthSpec("K"),
            limiter=Slow(),
        )
    assert info.value.code == "timeout" and info.value.attempts == 0 and sent == []


async def test_unforeseen_exception_in_flight_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", "k")

    def boom(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("something odd with sk-secret inside")

    http = httpx.AsyncClient(transport=httpx.MockTransport(boom))
    with pytest.raises(DecisionProviderError) as info:
        await send_never_replay(
            http,
            OutboundRequest("POST", "http://x/", b"{}"),
            provider="p",
            deadline=datetime.now(UTC) + timedelta(seconds=2),
            auth=AuthSpec("K"),
        )
    assert info.value.code == "outcome_unknown"
    assert "RuntimeError" in str(info.value) and "sk-secret" not in str(info.value)


async def test_bad_url_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", "k")
    async with httpx.AsyncClient() as http:
        with pytest.raises(DecisionProviderError) as info:
            await send_never_replay(
                http,
                OutboundRequest("POST", "ftp://x/", b"{}"),
                provider="p",
                deadline=datetime.now(UTC) + timedelta(seconds=2),
                auth=AuthSpec("K"),
            )
    assert info.value.code == "configuration"


async def test_a_paid_call_leaves_no_reference_cycle_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx ties a response and its body stream in a cycle (Response.stream -> its bound
    stream -> Response): at hundreds of requests a second only the cyclic collector frees
    them, in pauses of up to 250 ms (``make bench``). A call's objects go by refcount."""
    monkeypatch.setenv("K", "k")
    http = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=b'{"a":1}'))
    )

    async def call() -> bytes:
        response = await send_never_replay(
            http,
            OutboundRequest("POST", "http://x/", b"{}"),
            provider="p",
            deadline=datetime.now(UTC) + timedelta(seconds=5),
            auth=AuthSpec("K"),
        )
        return response.body

    assert await call() == b'{"a":1}'  # warm: first-use caches are not garbage
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert await call() == b'{"a":1}'
        left = gc.collect()
    finally:
        gc.enable()
        await http.aclose()
    assert left < 20, f"{left} objects a cycle kept after 20 calls"
