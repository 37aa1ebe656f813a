"""Recording redacts a key in every form a hostile host may echo it: base64 of the key and of
``Bearer <key>`` (padded or not, URL-safe), ``Basic`` credentials holding it, the key upper-
or lower-cased, URL-quoted; and a secret marked with ``shared.scrub.mark_secret`` and every
other provider key set in the environment, in headers, JSON, text and binary bodies."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from shared.scrub import mark_secret
from shared.settings import get_settings
from worker.providers.observers import ObservedResponse, replay_miss
from worker.testing.faux import FauxProvider, FauxResponse, FauxServer
from worker.testing.faux.outcome import Outcome
from worker.testing.faux.reading import Admission
from worker.testing.recording import REDACTED, Recorder

from .support import KEY_VARS, MODELS, decide, recordings, request, settings_at, use_record_dir

MARKED = f"vault-{uuid.uuid4().hex}"
OTHER_KEY = f"sk-other-{uuid.uuid4().hex}"


def encodings(key: str) -> dict[str, str]:
    b64 = base64.b64encode
    return {
        "b64": b64(key.encode()).decode(),
        "b64-unpadded": b64(key.encode()).decode().rstrip("="),
        "b64-urlsafe": base64.urlsafe_b64encode(key.encode()).decode(),
        "bearer-b64": b64(f"Bearer {key}".encode()).decode(),
        "basic": "Basic " + b64(f"someone:{key}".encode()).decode(),
        "basic-key-first": "Basic " + b64(f"{key}:".encode()).decode(),
        "upper": key.upper(),
        "lower": key.lower(),
        "quoted": quote(key, safe=""),
        "marked": MARKED,
        "other-key": OTHER_KEY,
    }


def leaks(text: str, key: str) -> list[str]:
    return [name for name, form in encodings(key).items() if form in text] + (
        ["key"] if key in text else []
    )


class EncodingFaux(FauxProvider):
    """A hostile host: the request's key comes back in every encoding, in headers and body."""

    async def handle_async(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None = None,
    ) -> Outcome:
        outcome = await super().handle_async(method, path, query, headers, body, admission)
        if not isinstance(outcome, FauxResponse) or admission is None:
            return outcome
        lowered = {k.lower(): v for k, v in headers.items()}
        auth = lowered.get("authorization") or lowered.get("x-api-key") or ""
        key = auth.removeprefix("Bearer ").strip()
        forms = encodings(key)
        echoed = dict(outcome.headers)
        echoed.update({f"x-enc-{name}": value for name, value in forms.items()})
        payload = json.loads(outcome.body)
        payload["enc"] = forms
        payload["enc_text"] = " | ".join(f"{n}={v}" for n, v in forms.items())
        return FauxResponse(outcome.status, echoed, json.dumps(payload).encode())


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize("provider", sorted(KEY_VARS))
def test_no_encoding_of_the_key_reaches_a_recording(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-Canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VARS[provider], key)
    other_var = next(v for p, v in KEY_VARS.items() if p != provider)
    monkeypatch.setenv(other_var, OTHER_KEY)
    mark_secret(MARKED)
    use_record_dir(monkeypatch, tmp_path)
    with FauxServer(EncodingFaux()) as host:
        decide(settings_at(host.url), provider, request(model=MODELS[provider]))
    [doc] = recordings(tmp_path).values()
    text = json.dumps(doc)
    assert leaks(text, key) == []
    headers = doc["response"]["headers"]
    assert all(REDACTED in headers[f"x-enc-{name}"] for name in encodings(key)), headers
    assert set(doc["response"]["body"]["enc"].values()) <= {REDACTED, f"Basic {REDACTED}"}


def _observed(body: bytes, key: str, content_type: str) -> ObservedResponse:
    return ObservedResponse(
        provider="openrouter",
        method="POST",
        url="http://host.invalid/api/v1/systemone",
        request_body=b'{"model": "m"}',
        request_headers={},
        status=200,
        headers=httpx.Headers({"content-type": content_type}),
        body=body,
        key=key,
    )


@pytest.mark.parametrize("kind", ["text", "binary"])
def test_text_and_binary_bodies_are_redacted_too(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-Canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("PARALLEL_API_KEY", OTHER_KEY)
    words = " ".join(encodings(key).values()) + f" {key}"
    body = words.encode() if kind == "text" else b"\xff\xfe" + words.encode() + b"\x00\x81"
    mark_secret(MARKED)
    path = Recorder(tmp_path).record(_observed(body, key, "text/plain"))
    assert path is not None
    doc = json.loads(path.read_text())
    response = doc["response"]
    stored = (
        response["body_text"]
        if kind == "text"
        else base64.b64decode(response["body_base64"]).decode("latin-1")
    )
    assert leaks(stored, key) == []
    if kind == "binary":
        assert stored.startswith("\xff\xfe") and stored.endswith("\x00\x81")


def test_a_replay_miss_header_holding_an_encoded_key_is_dropped() -> None:
    key = f"sk-Canary-{uuid.uuid4().hex}"
    header = {"x-decisions-replay-miss": f"no recording; {base64.b64encode(key.encode()).decode()}"}
    assert replay_miss(header, key) == "the replay has no recording of this request"
