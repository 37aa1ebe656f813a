"""Recording: every response the providers receive is saved under its request digest, and
no key, auth header or operator secret reaches a file (a canary key through the real
transport, against a faux that echoes every header back)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.settings import get_settings
from worker.providers.observers import ObservedResponse, observing
from worker.testing.faux import FauxBehaviour, FauxServer
from worker.testing.recording import REDACTED, Recorder, redact_fields, request_digest

from .support import (
    KEY_VARS,
    MODELS,
    EchoingFaux,
    decide,
    recordings,
    request,
    settings_at,
    use_record_dir,
)

PROVIDERS = sorted(KEY_VARS)


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def canary() -> str:
    return f"sk-canary-{uuid.uuid4()}"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_canary_key_reaches_no_recording_even_when_the_host_echoes_it(
    provider: str, canary: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARS[provider], canary)
    record_dir = tmp_path / "recordings"
    use_record_dir(
        monkeypatch, record_dir,
        secret_headers=["X-Session-Token"],
        secret_fields=["echo.headers.x-decisions-call", "usage"],
    )
    echo = EchoingFaux()
    with FauxServer(echo) as host:
        settings = settings_at(host.url)
        answered = decide(settings, provider, request(model=MODELS[provider]))
        echo.override("job-2/decide", FauxBehaviour(mode="status", status_code=400))
        with pytest.raises(DecisionProviderError) as refused:
            decide(settings, provider, request(model=MODELS[provider], call_key="job-2/decide",
                                               state="another state"))
    assert refused.value.code == "invalid_request"

    files = sorted(record_dir.iterdir())
    assert len(files) == 2, "one file per request, and no temporary file left behind"
    for path in files:
        text = path.read_text()
        assert canary not in text and canary.replace("-", "%2D") not in text, path.name
    docs = recordings(record_dir)
    ok = docs[answered.receipt.request_sha256]
    failed = next(d for k, d in docs.items() if k != answered.receipt.request_sha256)
    assert failed["request_sha256"] == refused.value.receipt.request_sha256
    assert (ok["response"]["status"], failed["response"]["status"]) == (200, 400)
    for doc in (ok, failed):
        headers = doc["response"]["headers"]
        assert "authorization" not in headers and "x-api-key" not in headers
        assert "set-cookie" not in headers and "x-session-token" not in headers
        echoed = {k: v for k, v in headers.items() if k.startswith("x-echo-")}
        secret = echoed.get("x-echo-authorization") or echoed["x-echo-x-api-key"]
        assert REDACTED in secret
        body = doc["response"]["body"]
        assert body["echo"]["headers"]["x-decisions-call"] == REDACTED
        assert REDACTED in body["echo"]["headers"].get(
            "authorization", body["echo"]["headers"].get("x-api-key", "")
        )
        assert doc["provider"] == provider
    assert failed["response"]["body"]["message"] in {
        f"bad key {REDACTED}", f"bad key Bearer {REDACTED}"
    }
    if "usage" in ok["response"]["body"]:
        assert ok["response"]["body"]["usage"] == REDACTED


def test_a_recording_holds_the_questions_and_model_and_the_whole_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    use_record_dir(monkeypatch, tmp_path)
    with FauxServer() as host:
        result = decide(settings_at(host.url), "openrouter", request())
    sent = request()
    doc = recordings(tmp_path)[result.receipt.request_sha256]
    assert doc["format"] == "decisions-recording/1"
    assert doc["request"]["model"] == sent.model
    assert doc["request"]["questions"] == sent.questions
    assert doc["request"]["path"] == "/api/v1/systemone"
    assert set(doc["request"]["fields"]) == {"model", "state", "questions"}
    assert set(doc["request"]["question_digests"]) == set(sent.questions)
    assert "state" not in doc["request"], "the state is kept as a digest only"
    body = doc["response"]["body"]
    assert body["id"] == result.receipt.decision_id
    assert set(body["answers"]) == set(sent.questions)
    assert doc["response"]["headers"]["content-type"] == "application/json"
    assert "content-length" not in doc["response"]["headers"]


def _observed(status: int, body: dict[str, Any]) -> ObservedResponse:
    request_body = json.dumps({"model": "m", "state": "s", "questions": {}}).encode()
    return ObservedResponse(
        provider="openrouter", method="POST", url="http://host.invalid/api/v1/systemone",
        request_body=request_body, request_headers={}, status=status,
        headers=httpx.Headers({"content-type": "application/json"}),
        body=json.dumps(body).encode(),
    )


def test_a_failure_never_replaces_a_recorded_answer_but_an_answer_replaces_a_failure(
    tmp_path: Path,
) -> None:
    recorder = Recorder(tmp_path)
    assert recorder.record(_observed(429, {"error": "slow down"})) is not None
    path = recorder.record(_observed(200, {"answers": {"a": 1}}))
    assert path is not None
    assert recorder.record(_observed(503, {"error": "down"})) is None
    stored = json.loads(path.read_text())
    assert stored["response"]["status"] == 200
    assert stored["response"]["body"] == {"answers": {"a": 1}}
    assert path.stem == request_digest(_observed(200, {}).request_body)


def test_secret_field_paths_take_wildcards_and_list_positions() -> None:
    value = {"a": {"b": [{"c": 1, "d": 2}, {"c": 3}]}, "e": {"x": 1, "y": 2}, "f": 5}
    redacted = redact_fields(value, ["a.b.*.c", "e.*", "a.b.1", "missing.path"])
    assert redacted == {
        "a": {"b": [{"c": REDACTED, "d": 2}, REDACTED]},
        "e": {"x": REDACTED, "y": REDACTED},
        "f": 5,
    }


def test_the_digest_is_the_receipts_and_survives_key_order_and_whitespace() -> None:
    body = {"model": "m", "state": {"b": 1, "a": [1, 2]}, "questions": {"q": {"type": "noul"}}}
    compact = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    loose = json.dumps(dict(reversed(body.items())), indent=4).encode()
    assert request_digest(compact) == request_digest(loose)
    assert request_digest(compact) != request_digest(compact.replace(b'"m"', b'"n"'))


def test_a_failing_observer_loses_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    seen: list[int] = []

    def broken(observed: ObservedResponse) -> None:
        seen.append(observed.status)
        raise OSError("disk full")

    with FauxServer() as host, observing(broken):
        result = decide(settings_at(host.url), "openrouter", request())
    assert seen == [200]
    assert result.receipt.status == "answered"
