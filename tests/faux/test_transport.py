"""The in-process transport with an async client: latency awaits, failures raise alike."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from shared.canonical import canonical_bytes
from worker.testing.faux import FauxBehaviour, FauxDrop, FauxProvider, FauxResponse

from .conftest import AUTH, system_one_body

BODY = canonical_bytes(system_one_body())


def test_it_is_a_mock_transport(provider: FauxProvider) -> None:
    assert isinstance(provider.transport(), httpx.MockTransport)


def test_async_latency_does_not_block_the_loop() -> None:
    provider = FauxProvider(FauxBehaviour(latency_ms=200))

    async def burst() -> list[int]:
        async with httpx.AsyncClient(transport=provider.transport(), base_url="http://f") as c:
            responses = await asyncio.gather(
                *(c.post("/v1/systemone", content=BODY, headers=AUTH) for _ in range(200))
            )
        return [r.status_code for r in responses]

    assert asyncio.run(burst()) == [200] * 200
    assert provider.total() == 200
    # Held together on the loop, not one after another (a blocking sleep would make it 1).
    assert provider.peak_in_flight() >= 100, provider.peak_in_flight()


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("drop_before_read", httpx.RemoteProtocolError),
        ("drop_after_read", httpx.RemoteProtocolError),
        ("reset_after_read", httpx.ReadError),
    ],
)
def test_async_connection_modes_raise_what_httpx_raises(
    mode: str, error: type[httpx.TransportError]
) -> None:
    provider = FauxProvider(FauxBehaviour(mode=mode))

    async def send() -> None:
        async with httpx.AsyncClient(transport=provider.transport(), base_url="http://f") as c:
            await c.post("/v1/systemone", content=BODY, headers=AUTH)

    with pytest.raises(httpx.TransportError) as caught:
        asyncio.run(send())
    assert type(caught.value) is error
    assert caught.value.request.url.path == "/v1/systemone"


def test_async_read_timeout_waits_only_the_timeout() -> None:
    provider = FauxProvider(FauxBehaviour(latency_ms=5000))

    async def send() -> None:
        async with httpx.AsyncClient(transport=provider.transport(), base_url="http://f") as c:
            await c.post(
                "/v1/systemone", content=BODY, headers=AUTH, timeout=httpx.Timeout(10, read=0.1)
            )

    started = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(send())
    assert time.perf_counter() - started < 1.0


def test_no_timeout_waits_the_whole_latency(provider: FauxProvider) -> None:
    provider.set_behaviour(FauxBehaviour(latency_ms=120))
    with httpx.Client(transport=provider.transport(), base_url="http://f", timeout=None) as c:
        started = time.perf_counter()
        assert c.post("/v1/systemone", content=BODY, headers=AUTH).status_code == 200
    assert time.perf_counter() - started >= 0.12


def test_handle_is_usable_without_httpx(provider: FauxProvider) -> None:
    response = provider.handle("POST", "/v1/systemone", {}, {"AUTHORIZATION": "Bearer k"}, BODY)
    assert isinstance(response, FauxResponse) and response.status == 200
    assert response.headers["content-type"] == "application/json"
    provider.set_behaviour(FauxBehaviour(mode="reset_after_read"))
    drop = provider.handle("POST", "/v1/systemone", {}, {"Authorization": "Bearer k"}, BODY)
    assert drop == FauxDrop(read=True, reset=True)


def test_admission_is_decided_once(provider: FauxProvider) -> None:
    provider.set_behaviour(FauxBehaviour(mode="status", fail_first=1))
    assert provider.admit("GET", "/_faux/calls", {}) is None  # not a decision: no budget used
    admission = provider.admit("POST", "/v1/systemone", {"X-Decisions-Call": "a%25b"})
    assert admission is not None and admission.mode == "status" and admission.call_key == "a%b"
    # Handing the admission over does not spend the budget twice ...
    response = provider.handle("POST", "/v1/systemone", {}, {"Authorization": "Bearer k"}, BODY,
                               admission)
    assert isinstance(response, FauxResponse) and response.status == 500
    # ... so the next request finds it spent.
    again = provider.handle("POST", "/v1/systemone", {}, {"Authorization": "Bearer k"}, BODY)
    assert isinstance(again, FauxResponse) and again.status == 200


def test_a_faux_bug_is_a_500_that_says_so(
    provider: FauxProvider, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import worker.testing.faux.app as app

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(app, "system_one_response", broken)
    response = provider.handle("POST", "/v1/systemone", {}, {"Authorization": "Bearer k"}, BODY)
    assert isinstance(response, FauxResponse)
    assert response.status == 500
    assert response.headers["x-faux-internal-error"] == "ZeroDivisionError"
    assert "internal error" in caplog.text
