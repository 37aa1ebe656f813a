"""System One flavours: OpenRouter's model rule, TypeSafe's header, other hosts, the faux."""

from __future__ import annotations

import json

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.setting_types import SystemOneHost
from shared.settings import Settings
from worker.providers import (
    DecisionRequest,
    ProviderRegistry,
    SystemOneConfig,
    SystemOneProvider,
)
from worker.providers.httpbase import CALL_KEY_HEADER
from worker.testing.faux import FauxProvider

from .support import FAST, STATE, deadline, questions


def _openrouter(
    default_model: str | None = None,
) -> tuple[SystemOneProvider, FauxProvider, list[httpx.Request]]:
    faux = FauxProvider()
    inner = faux.transport()
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> httpx.Response:
        await request.aread()
        sent.append(request)
        return await inner.handle_async_request(request)

    settings = Settings(
        openrouter_base_url="http://faux.invalid/api", openrouter_default_model=default_model
    )
    http = httpx.AsyncClient(transport=httpx.MockTransport(record))
    return (
        SystemOneProvider(SystemOneConfig.openrouter(settings), http=http, policy=FAST),
        faux,
        sent,
    )


def test_openrouter_without_a_model_is_refused_before_sending() -> None:
    provider, faux, sent = _openrouter()
    with pytest.raises(DecisionProviderError) as info:
        provider.prepare(DecisionRequest(state=STATE, questions=questions()))
    assert (info.value.code, info.value.field) == ("invalid_request", "model")
    assert sent == [] and faux.total() == 0


@pytest.mark.usefixtures("keys")
async def test_openrouter_default_model_is_used_when_configured() -> None:
    provider, _, sent = _openrouter(default_model="liquid/d1")
    result = await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    assert json.loads(sent[0].content)["model"] == "liquid/d1"
    assert result.receipt.model == "liquid/d1"
    assert result.receipt.cost_basis == "reported"
    assert result.receipt.decision_id and result.receipt.decision_id.startswith("gen-dec-")


@pytest.mark.usefixtures("keys")
async def test_openrouter_body_is_exactly_model_state_questions() -> None:
    provider, _, sent = _openrouter()
    await provider.decide(
        DecisionRequest(state={"a": [1, 2]}, questions=questions(), model="liquid/d1"), deadline()
    )
    body = json.loads(sent[0].content)
    assert set(body) == {"model", "state", "questions"}
    assert body["questions"] == questions(), "System One questions go as they are"
    assert sent[0].url.path == "/api/v1/systemone"


def test_call_key_header_is_ascii_safe() -> None:
    provider, _, _ = _openrouter(default_model="liquid/d1")
    prepared = provider.prepare(
        DecisionRequest(state="s", questions=questions(), call_key="jöb 1/decide")
    )
    assert prepared.headers[CALL_KEY_HEADER] == "j%C3%B6b%201/decide"
    no_key = provider.prepare(DecisionRequest(state="s", questions=questions()))
    assert CALL_KEY_HEADER not in no_key.headers


def test_request_digest_is_of_the_bytes_sent_and_stable() -> None:
    provider, _, _ = _openrouter(default_model="liquid/d1")
    a = provider.prepare(DecisionRequest(state={"x": 1, "y": 2}, questions=questions()))
    b = provider.prepare(DecisionRequest(state={"y": 2, "x": 1}, questions=questions()))
    assert a.body == b.body and a.request_sha256 == b.request_sha256


@pytest.mark.usefixtures("keys")
async def test_custom_host_path_and_request_id_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {
            "answers": {"is_urgent": {"type": "noul", "noul": 0.7}},
            "usage": {"input_tokens": 1000},
        }
        return httpx.Response(200, json=body, headers={"x-req": "r-42"})

    host = SystemOneHost(
        base_url="http://fw.invalid",
        key_env="ACME_API_KEY",
        path="/inference/v1/systemone",
        default_model="accounts/a/models/m",
        models=["accounts/a/models/m"],
        price_per_mtok_usd=2.0,
        request_id_header="x-req",
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = SystemOneProvider(SystemOneConfig.host("acme", host), http=http, policy=FAST)
        result = await provider.decide(
            DecisionRequest(state="s", questions=questions()), deadline()
        )
        with pytest.raises(DecisionProviderError) as info:
            provider.prepare(DecisionRequest(state="s", questions=questions(), model="other"))
    assert seen[0].url.path == "/inference/v1/systemone"
    assert result.receipt.decision_id == "r-42"
    assert (result.receipt.cost_usd, result.receipt.cost_basis) == (0.002, "estimate")
    assert result.answers["department"].refused
    assert info.value.field == "model"


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize(
    ("sent_id", "kept"),
    [
        ("gen-1700000000-AbC", "gen-1700000000-AbC"),
        ("x" * 100_000, None),  # megabytes would ride on every message and log line
        ("gen-1\nlevel=error forged", None),  # a line break: a forged log line
        ("", None),
    ],
)
async def test_the_provider_s_request_id_is_kept_only_when_it_is_an_id(
    sent_id: str, kept: str | None
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"id": sent_id, "answers": {"is_urgent": {"type": "noul", "noul": 0.7}}}
        return httpx.Response(200, json=body)

    settings = Settings(openrouter_base_url="http://or.invalid/api")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = SystemOneProvider(SystemOneConfig.openrouter(settings), http=http, policy=FAST)
        result = await provider.decide(
            DecisionRequest(state="s", questions=questions(), model="typesafe/jev-1.14"),
            deadline(),
        )
    assert result.receipt.decision_id == kept
    assert result.answers["is_urgent"].value is True  # the answer itself is kept either way


async def test_registry_default_is_the_in_process_faux(no_keys: None) -> None:
    faux = FauxProvider()
    registry = ProviderRegistry.from_settings(
        Settings(faux_url=None), faux_transport=faux.transport()
    )
    try:
        assert registry.default_name == "faux"
        provider = registry.get(None)
        result = await provider.decide(
            DecisionRequest(state=STATE, questions=questions(), call_key="j/decide"), deadline()
        )
    finally:
        await registry.aclose()
    assert result.receipt.provider == "faux" and result.receipt.status == "answered"
    assert faux.calls() == {"j/decide": 1}
    assert faux.count(result.receipt.request_sha256 or "") == 1


async def test_registry_builds_its_own_faux_when_none_is_given(no_keys: None) -> None:
    registry = ProviderRegistry.from_settings(Settings(faux_url=None))
    try:
        result = await registry.get("faux").decide(
            DecisionRequest(state=STATE, questions=questions()), deadline()
        )
    finally:
        await registry.aclose()
    assert result.receipt.model == "faux-1"


async def test_faux_url_goes_through_the_shared_client(no_keys: None) -> None:
    faux = FauxProvider()
    http = httpx.AsyncClient(transport=faux.transport())
    registry = ProviderRegistry.from_settings(Settings(faux_url="http://faux.example:9"), http=http)
    try:
        provider = registry.get("faux")
        prepared = provider.prepare(DecisionRequest(state=STATE, questions=questions()))
        assert prepared.url == "http://faux.example:9/api/v1/systemone"
        await provider.send(prepared, deadline())
    finally:
        await registry.aclose()
    assert faux.total() == 1
    assert not http.is_closed, "the registry never closes a client it was given"
    await http.aclose()
