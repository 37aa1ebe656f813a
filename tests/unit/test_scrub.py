"""``shared.scrub``: URL passwords masked in reprs; secrets, URL credentials and queries and
known key shapes removed from error texts; handler output strict JSON or a typed error."""

from __future__ import annotations

import base64
import string
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import HandlerOutputInvalid
from shared.scrub import (
    REDACTED,
    current_secrets,
    error_text,
    json_output,
    mark_secret,
    mask_url,
    scrub_text,
    watch_key_env,
)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw@redis:6379/0", "redis://:***@redis:6379/0"),
        ("rediss://user:pw@h:6380/1", "rediss://user:***@h:6380/1"),
        ("postgresql+psycopg://u:p%40ss@db:5432/x", "postgresql+psycopg://u:***@db:5432/x"),
        ("postgresql://u:pa/ss@db/x", "postgresql://u:***@db/x"),
        ("https://TOKEN@github.com/o/r", "https://***@github.com/o/r"),
        (
            "postgresql://db/x?sslmode=require&password=pw",
            "postgresql://db/x?sslmode=require&password=***",
        ),
        ("sqlite:///./decisions.db", "sqlite:///./decisions.db"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("not a url", "not a url"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_urls_in_a_text_lose_userinfo_query_and_fragment() -> None:
    text = "GET https://u:p@api.example:8443/v1/x?api_key=abc&y=1#frag failed (see redis://:pw@r/0)"
    assert scrub_text(text) == "GET https://api.example:8443/v1/x failed (see redis://r/0)"


@pytest.mark.parametrize(
    "leak",
    [
        "sk-live-4f9a8b7c6d5e",
        "sk-or-v1-0123456789abcdef",
        "sk_live_51Habcdef",
        "Authorization: Bearer abc.def-ghi",
        "api_key=abcdef123",
        "apiKey: abcdef123",
        '{"api_key": "abcdef123"}',
        "Weird(password='hunter2')",
        "client_secret=xyz987",
        "ghp_0123456789abcdefABCDEF0123",
        "AKIAABCDEFGHIJKLMNOP",
        "xoxb-1234567890-abcdef",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature",
    ],
)
def test_known_key_shapes_are_removed(leak: str) -> None:
    scrubbed = scrub_text(f"call failed: {leak} (retrying)")
    secret = leak.split("=")[-1].split(": ")[-1].strip("'\")}").split()[-1]
    assert secret not in scrubbed
    assert REDACTED in scrubbed and scrubbed.startswith("call failed: ")


_KEYS = st.text(string.ascii_letters + string.digits + "-_", min_size=12, max_size=48)


@settings(max_examples=200, deadline=None)
@given(key=_KEYS, user=st.text(string.ascii_letters, min_size=0, max_size=12))
def test_every_form_of_a_secret_is_removed(key: str, user: str) -> None:
    forms = [
        key,
        key.upper(),
        key.lower(),
        quote(key, safe=""),
        base64.b64encode(key.encode()).decode(),
        base64.b64encode(key.encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(key.encode()).decode(),
        base64.b64encode(f"Bearer {key}".encode()).decode(),
        base64.b64encode(f"{user}:{key}".encode()).decode(),
    ]
    for form in forms:
        scrubbed = scrub_text(f"header x={form}; body [{form}] done", [key])
        assert form not in scrubbed, form
        assert key not in scrubbed


def test_ordinary_words_after_token_or_basic_stay() -> None:
    text = "Token expired; Basic authentication failed; see the token docs"
    assert scrub_text(text) == text
    assert scrub_text("Basic dXNlcjpwYXNz") == f"Basic {REDACTED}"
    assert scrub_text("Token 9f8e7d6c5b") == f"Token {REDACTED}"


def test_short_secrets_are_removed_verbatim_only() -> None:
    assert scrub_text("abc ABC", ["abc"]) == f"{REDACTED} ABC"


def test_current_secrets_reads_key_variables_and_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key-1234")
    monkeypatch.setenv("MY_HOST_KEY", "host-key-5678")
    watch_key_env("MY_HOST_KEY")
    mark_secret("vault-value-9999")
    found = current_secrets()
    assert {"openai-key-1234", "host-key-5678", "vault-value-9999"} <= set(found)
    monkeypatch.delenv("OPENAI_API_KEY")
    assert "openai-key-1234" not in current_secrets()


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_error_text_is_type_and_scrubbed_message_within_the_limit() -> None:
    exc = ValueError("POST https://pay.example/c?api_key=sk-live-abcdef failed with key123456")
    assert error_text(exc, 500, ["key123456"]) == (
        f"ValueError: POST https://pay.example/c failed with {REDACTED}"
    )
    assert error_text(exc, 12, []) == "ValueError: "[:12]
    assert error_text(Unprintable(), 500, []) == "Unprintable"
    assert error_text(KeyError(), 500, []) == "KeyError"


def test_a_huge_message_is_cut_before_scrubbing_without_leaking_a_split_secret() -> None:
    secret = "s3cr3t-value-0123456789"
    exc = RuntimeError("x" * 65_530 + secret)
    text = error_text(exc, 100_000, [secret])
    assert "s3cr3t" not in text and len(text) < 65_600


@pytest.mark.parametrize(
    "value",
    [None, 1, 1.5, "s", [1, {"a": None}], {"k": [True, False]}],
)
def test_json_output_passes_json(value: object) -> None:
    assert json_output(value) == value


class Weird:
    def __repr__(self) -> str:
        return "Weird(password='hunter2')"


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(Weird(), "Weird"), ({"a": Weird()}, "dict"), (float("nan"), "float (NaN or infinity)")],
)
def test_json_output_refuses_what_has_no_json_form_naming_the_type_only(
    value: object, type_name: str
) -> None:
    with pytest.raises(HandlerOutputInvalid) as info:
        json_output(value)
    assert type_name in str(info.value)
    assert "hunter2" not in str(info.value)
