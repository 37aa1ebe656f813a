"""Per-provider settings are keyed by names that exist (``worker.cli.startup``): a key naming
no provider is refused at start, where before it was ignored in silence and its cap with it."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from shared.errors import ConfigurationError
from shared.settings import Settings
from worker.cli.startup import PER_PROVIDER, check_registries

#: Settings keyed by a name that are not per-provider: they name new hosts, or people.
KEYED_BY_OTHER_NAMES = {"systemone_hosts", "chat_hosts", "console_users"}

HOSTS: dict[str, Any] = {
    "systemone_hosts": {"mine": {"base_url": "https://s1.example", "key_env": "MINE_KEY"}},
    "chat_hosts": {"vllm": {"base_url": "http://vllm:8000"}},
}


def test_every_setting_keyed_by_name_is_checked_or_known_not_to_be_per_provider() -> None:
    keyed = {
        name
        for name, info in Settings.model_fields.items()
        if typing.get_origin(info.annotation) is dict
    }
    assert keyed - KEYED_BY_OTHER_NAMES == set(PER_PROVIDER), (
        "a new setting keyed by name: add it to worker.cli.startup.PER_PROVIDER "
        "(or here, if its keys are not providers)"
    )


@pytest.mark.parametrize(
    "setting",
    [
        {"max_price_per_mtok_usd": {"mine": 0.5, "openrouter": 1.0, "faux": 0.1}},
        {"daily_ceiling_usd": {"mine": 1.0, "vllm": 2.0, "parallel": 3.0}},
        {"provider_limits": {"vllm": {"max_in_flight": 2}, "mine": {"per_second": 1}}},
    ],
)
def test_providers_hosts_and_runtimes_they_apply_to_are_accepted(setting: dict[str, Any]) -> None:
    # "faux" is a name even where the faux is not loaded: it is known, and harmless.
    check_registries(Settings(faux_in_process=False, **HOSTS, **setting))


def test_a_price_for_a_chat_runtime_is_refused_it_applies_to_providers_only() -> None:
    with pytest.raises(ConfigurationError, match="DECISIONS_MAX_PRICE_PER_MTOK_USD") as caught:
        check_registries(Settings(**HOSTS, max_price_per_mtok_usd={"vllm": 0.5}))
    assert "'vllm'" in str(caught.value) and "mine" in str(caught.value)


def test_every_misnamed_key_is_named_in_one_line() -> None:
    settings = Settings(daily_ceiling_usd={"Faux": 0}, provider_limits={"opnai": {}})
    with pytest.raises(ConfigurationError) as caught:
        check_registries(settings)
    text = str(caught.value)
    assert "\n" not in text
    assert "DECISIONS_DAILY_CEILING_USD" in text and "did you mean 'faux'" in text
    assert "DECISIONS_PROVIDER_LIMITS" in text and "did you mean 'openai'" in text
