"""A provider's, a host's or the faux's base URL that is no HTTP URL is refused with the
settings, naming the setting: ``DECISIONS_FAUX_URL=nonsense`` (or a base URL without its
``https://``) ran, and every job was escalated ``decision_interrupted`` after a "request
sent" of unknown cost, the setting never named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.settings import Settings

FIELDS = (
    "faux_url",
    "openrouter_base_url",
    "typesafe_base_url",
    "parallel_base_url",
    "openai_base_url",
)
NOT_HTTP = ("nonsense", "127.0.0.1:8765", "ftp://files.example/x", "http://", "https:///v1")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("url", NOT_HTTP)
def test_a_base_url_that_is_no_http_url_is_refused(field: str, url: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**{field: url})
    (error,) = info.value.errors()
    assert error["loc"] == (field,)
    assert "https://HOST" in error["msg"]


@pytest.mark.parametrize(
    ("field", "hosts"),
    [
        ("systemone_hosts", {"mine": {"base_url": "nonsense", "key_env": "MINE_KEY"}}),
        ("chat_hosts", {"vllm": {"base_url": "vllm:8000"}}),
    ],
)
def test_a_host_whose_base_url_is_no_http_url_is_refused(field: str, hosts: Any) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**{field: hosts})
    (error,) = info.value.errors()
    assert error["loc"] == (field, next(iter(hosts)), "base_url")
    assert "https://HOST" in error["msg"]


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8765", "https://openrouter.ai/api", "http://u:pw@faux:8765/", "HTTPS://H"],
)
def test_an_http_url_is_accepted(url: str) -> None:
    settings = Settings(faux_url=url, openai_base_url=url)
    assert (settings.faux_url, settings.openai_base_url) == (url, url)
