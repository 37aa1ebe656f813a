"""``shared.scrub`` finds a key as it is sent and as a host echoes it back: read from a
variable with a line break around it (a Kubernetes secret file), JSON-escaped (``\\/``,
``\\uXXXX``, ``\\"``) or URL-encoded (``%2F``, ``+`` for a space) in an error or a recorded
response."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest

from shared.scrub import REDACTED, current_secrets, error_text, mark_secret, scrub_text
from worker.providers.observers import ObservedResponse
from worker.testing.recording import Recorder

KEY = "Zq3xVb7pLm9Kt2WnQ"
#: A key with what JSON and URLs escape: ``/``, ``+``, ``=``.
SLASHED = "Zq3x/Vb7p+Lm9Kt2WnQ=="


# --- a key read with whitespace around it (F4) ------------------------------------------


@pytest.mark.parametrize("raw", [f"{KEY}\n", f"{KEY}\r\n", f" {KEY} ", f"\n{KEY}", f"{KEY}\t"])
def test_a_key_is_scrubbed_as_it_is_sent_stripped(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    # The transport sends the key stripped (worker.providers.outbound.read_key); a host
    # echoes that, never the variable's raw value.
    monkeypatch.setenv("PARALLEL_API_KEY", raw)
    assert KEY not in scrub_text(f"invalid key {KEY}", current_secrets())
    assert KEY not in error_text(RuntimeError(f"401: key {KEY} refused"), 500)
    # The raw value (a text that quotes the variable whole) goes as well.
    assert raw not in scrub_text(f"read {raw} from the file", current_secrets())


def test_a_marked_secret_is_scrubbed_stripped_too() -> None:
    secret = f"vault-{uuid.uuid4().hex}"
    mark_secret(f"{secret}\n")
    assert secret not in scrub_text(f"the vault said {secret}.", current_secrets())


def test_a_variable_of_whitespace_only_is_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # read_key takes it for unset; as a "secret" it would eat every line break of a text.
    monkeypatch.setenv("PARALLEL_API_KEY", "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    secrets = current_secrets()
    assert all(s.strip() for s in secrets)
    assert scrub_text("line one\nline  two", secrets) == "line one\nline  two"


# --- JSON-escaped and URL-encoded forms (F5) ----------------------------------------------


def json_forms(secret: str) -> dict[str, str]:
    """What JSON encoders write of ``secret`` inside a string (Python, PHP, JavaScript)."""
    ascii_ = json.dumps(secret)[1:-1]
    native = json.dumps(secret, ensure_ascii=False)[1:-1]
    return {
        "json-ascii": ascii_,
        "json-native": native,
        "json-ascii-slash": ascii_.replace("/", "\\/"),
        "json-native-slash": native.replace("/", "\\/"),
    }


def url_forms(secret: str) -> dict[str, str]:
    return {
        "quoted": quote(secret, safe=""),
        "quoted-path": quote(secret),
        "quoted-plus": quote_plus(secret),
        "quoted-lower": quote(secret, safe="").lower(),
    }


#: Secrets with each character JSON or a URL escapes: ``/``, a quote, a backslash, a space,
#: non-ASCII (escaped as ``\\u00e9``), beyond the BMP (a surrogate pair).
ESCAPED_SECRETS = [
    SLASHED,
    'pa"ss\\word-0123',
    "pass word+1/2&3",
    "caf\u00e9-0f3a9c2d",
    "\U0001f511-7be41d09",
]


@pytest.mark.parametrize("secret", ESCAPED_SECRETS)
def test_json_escaped_and_url_encoded_forms_are_removed(secret: str) -> None:
    forms = json_forms(secret) | url_forms(secret)
    assert any(form != secret for form in forms.values())
    for name, form in forms.items():
        scrubbed = scrub_text(f'{{"error": "bad key={form}", "n": 1}}', [secret])
        assert form not in scrubbed, name
        assert REDACTED in scrubbed and scrubbed.endswith('", "n": 1}'), name


def test_base64_with_a_slash_is_removed_json_escaped() -> None:
    # PHP writes the base64 of the key, and of "Bearer <key>", with its / escaped as \/.
    key = "k3y???-wide-0123"
    encoded = [
        base64.b64encode(key.encode()).decode(),
        base64.b64encode(f"Bearer {key}".encode()).decode(),
    ]
    assert all("/" in e for e in encoded)
    for form in (e.replace("/", "\\/") for e in encoded):
        scrubbed = scrub_text(f'{{"echo": "{form}"}}', [key])
        assert form not in scrubbed and REDACTED in scrubbed


def test_a_recorded_text_body_keeps_no_json_escaped_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The reviewer's cassette: a body that is not JSON (or a JSON error body cut at its
    # prefix) is kept as text, so the host's escaping is not undone before scrubbing.
    monkeypatch.setenv("PARALLEL_API_KEY", f"{SLASHED}\n")
    echoed = json.dumps({"error": f"key={SLASHED}", "more": "x" * 40}).replace("/", "\\/")
    observed = ObservedResponse(
        provider="parallel",
        method="POST",
        url="https://api.example/v1/decisions",
        request_body=b'{"state": "x"}',
        request_headers={},
        status=401,
        headers=httpx.Headers({"x-echo": f"key={quote_plus(SLASHED)}"}),
        body=echoed[:-10].encode(),  # cut: no longer JSON
        key=SLASHED,
        auth_header="x-api-key",
    )
    document = json.dumps(Recorder(tmp_path).document(observed, "d" * 64))
    for form in (SLASHED, "Zq3x\\/Vb7p", "Zq3x\\\\/Vb7p", quote_plus(SLASHED)):
        assert form not in document, form
    assert "x-echo" in document and "body_text" in document
