"""The registry: names, the default, submit-time checks, and what ``describe`` shows."""

from __future__ import annotations

import json

import httpx
import pytest

from shared.errors import ConfigurationError
from shared.setting_types import SystemOneHost
from shared.settings import Settings
from worker.providers import BUILT_IN, DecisionProvider, ProviderRegistry


def _registry(**settings: object) -> ProviderRegistry:
    return ProviderRegistry.from_settings(Settings(**settings))  # type: ignore[arg-type]


def test_names_default_and_protocol() -> None:
    registry = _registry()
    assert registry.names()[: len(BUILT_IN)] == BUILT_IN
    assert registry.default_name == "faux"
    for name in registry.names():
        provider = registry.get(name)
        assert isinstance(provider, DecisionProvider)
        assert provider.name == name and provider.replay == "never"


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        _registry().get("nope")
    assert "nope" in str(info.value)
    for name in BUILT_IN:
        assert name in str(info.value)


def test_unknown_default_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        _registry(default_provider="nope")


def test_hosts_from_settings_and_no_shadowing_of_built_ins() -> None:
    host = SystemOneHost(base_url="https://fw.invalid", key_env="FW_KEY", models=["m1", "m2"])
    registry = _registry(systemone_hosts={"fireworks": host})
    assert registry.get("fireworks").models() == ("m1", "m2")
    with pytest.raises(ConfigurationError):
        _registry(systemone_hosts={"openrouter": host})


@pytest.mark.parametrize(
    ("provider", "model", "fields"),
    [
        (None, None, []),
        ("faux", None, []),
        ("nope", None, ["provider"]),
        ("openrouter", None, ["model"]),
        ("openrouter", "liquid/d1", []),
        ("parallel", "parallel-fast", []),
        ("parallel", "parallel-deep", ["model"]),
        ("openai", None, []),
        ("typesafe", None, []),
        ("fireworks", "m3", ["model"]),
        ("fireworks", "m1", []),
        ("fireworks", None, ["model"]),
    ],
)
def test_check(provider: str | None, model: str | None, fields: list[str]) -> None:
    host = SystemOneHost(base_url="https://fw.invalid", key_env="FW_KEY", models=["m1", "m2"])
    registry = _registry(systemone_hosts={"fireworks": host})
    assert [p.field for p in registry.check(provider, model)] == fields


def test_check_with_a_default_openrouter_model() -> None:
    assert _registry(openrouter_default_model="liquid/d1").check("openrouter", None) == []


def test_describe_never_shows_a_key(monkeypatch: pytest.MonkeyPatch, canary_key: str) -> None:
    monkeypatch.setenv("PARALLEL_API_KEY", canary_key)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rows = {row["name"]: row for row in _registry().describe()}
    assert canary_key not in json.dumps(list(rows.values()))
    assert rows["parallel"]["key_env"] == "PARALLEL_API_KEY" and rows["parallel"]["key_set"] is True
    assert rows["openai"]["key_set"] is False
    assert rows["faux"]["key_env"] is None and rows["faux"]["key_set"] is True
    assert rows["faux"]["default"] is True
    assert rows["parallel"]["models"] == ["parallel-fast"]
    assert rows["parallel"]["limits"]["max_questions"] == 100
    assert rows["openrouter"]["experimental_inputs"] == ["image"]
    assert rows["openrouter"]["models"] == ["(any)"]


async def test_aclose_closes_only_the_clients_it_made() -> None:
    given = httpx.AsyncClient()
    registry = ProviderRegistry.from_settings(Settings(), http=given)
    await registry.aclose()
    assert not given.is_closed
    await given.aclose()


@pytest.mark.parametrize(
    ("name", "url", "model"),
    [
        ("openrouter", "https://openrouter.ai/api/v1/systemone", "liquid/d1"),
        ("typesafe", "https://api.typesafe.ai/v1/systemone", None),
        ("parallel", "https://api.parallel.ai/v1/decisions", None),
        ("openai", "https://api.openai.com/v1/decisions", None),
    ],
)
def test_default_endpoints(name: str, url: str, model: str | None) -> None:
    from worker.providers import DecisionRequest

    request = DecisionRequest(
        state="s", questions={"q": {"type": "noul", "instructions": "?"}}, model=model
    )
    assert _registry().get(name).prepare(request).url == url


def test_transport_policy_comes_from_settings() -> None:
    registry = _registry(provider_timeout_s=12.5, max_transport_attempts=5)
    for name in registry.names():
        policy = registry.get(name).policy  # type: ignore[attr-defined]
        assert (policy.timeout_s, policy.max_attempts) == (12.5, 5)
