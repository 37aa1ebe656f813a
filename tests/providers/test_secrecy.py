"""The canary: every error path of every provider, with a key like ``sk-canary-<uuid>``; the
key must appear in no exception text, no receipt and no log line or output."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import pytest

from shared.errors import DecisionProviderError
from worker.testing.faux import FauxBehaviour

from .support import CASE_IDS, CASES, Case, Rig, deadline

ERROR_BEHAVIOURS: list[tuple[str, dict[str, Any], int]] = [
    ("status-401", {"mode": "status", "status_code": 401}, 0),
    ("status-422", {"mode": "status", "status_code": 422}, 0),
    ("status-503", {"mode": "status", "status_code": 503}, 0),
    ("status-408", {"mode": "status", "status_code": 408}, 0),
    ("rate-limit", {"mode": "rate_limit"}, 0),
    ("rate-limit-retry", {"mode": "rate_limit", "retry_after_s": 0}, 0),
    ("drop", {"mode": "drop_after_read"}, 0),
    ("reset", {"mode": "reset_after_read"}, 0),
    ("garbage", {"mode": "garbage"}, 0),
    ("bad-probabilities", {"mode": "bad_probabilities"}, 0),
    ("never-sent", {}, 99),
    ("late", {"latency_ms": 2_000}, 0),
]


class Echoing(httpx.AsyncBaseTransport):
    """A hostile host that puts the request's auth header in its error body and headers."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
        body = {
            "error": {
                "message": f"bad key {auth}",
                "ref_id": auth.split()[-1] if auth else "x",
                "type": auth,
                "code": 400,
                "metadata": {"echo": auth},
            },
            "detail": {"error_type": auth, "message": auth},
        }
        headers = {"x-request-id": auth, "x-typesafe-request-id": auth}
        return httpx.Response(400, json=body, headers=headers)


def _assert_clean(error: DecisionProviderError, key: str) -> None:
    texts = [str(error), repr(error), error.detail, str(error.ref_id), str(error.__dict__)]
    if error.receipt is not None:
        texts.append(error.receipt.model_dump_json())
    for text in texts:
        assert key not in text


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    ("behaviour", "failures"),
    [(b, f) for _, b, f in ERROR_BEHAVIOURS],
    ids=[n for n, _, _ in ERROR_BEHAVIOURS],
)
async def test_no_error_path_leaks_the_key(
    case: Case,
    behaviour: dict[str, Any],
    failures: int,
    keys: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    rig = Rig.build(case, FauxBehaviour(**behaviour), connect_failures=failures)
    try:
        with pytest.raises(DecisionProviderError) as info:
            await rig.provider.decide(case.request(), deadline(0.5))
    finally:
        await rig.aclose()
    _assert_clean(info.value, keys)
    out, err = capsys.readouterr()
    assert keys not in caplog.text and keys not in out and keys not in err


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.key_env], ids=[c.name for c in CASES if c.key_env]
)
async def test_a_host_echoing_the_key_back_does_not_leak_it(
    case: Case, keys: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(transport=Echoing()) as http:
        with pytest.raises(DecisionProviderError) as info:
            await case.provider(http).decide(case.request(), deadline())
    assert info.value.code == "invalid_request"
    _assert_clean(info.value, keys)
    out, err = capsys.readouterr()
    assert keys not in caplog.text and keys not in out and keys not in err


async def test_success_receipts_and_logs_do_not_carry_the_key(
    keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for case in CASES:
        rig = Rig.build(case)
        try:
            result = await rig.provider.decide(case.request(), deadline())
        finally:
            await rig.aclose()
        assert keys not in result.receipt.model_dump_json()
    assert keys not in caplog.text


class EncodedEchoing(httpx.AsyncBaseTransport):
    """A hostile host that echoes the key in an encoded form where a reference id or an
    error kind goes (both reach the error's message when they look safe)."""

    def __init__(self, encode: Any) -> None:
        self.encode = encode

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
        key = auth.split()[-1] if auth else ""
        form = self.encode(key)
        body = {
            "error": {"message": "bad key", "ref_id": form, "type": form, "code": 400},
            "detail": {"error_type": form, "message": "bad key"},
        }
        headers = {"x-request-id": form, "x-typesafe-request-id": form}
        return httpx.Response(400, json=body, headers=headers)


ENCODINGS = {
    "upper": str.upper,
    "base64": lambda k: base64.b64encode(k.encode()).decode(),
    "bearer-base64": lambda k: base64.b64encode(f"Bearer {k}".encode()).decode(),
}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize(
    "case", [c for c in CASES if c.key_env], ids=[c.name for c in CASES if c.key_env]
)
async def test_a_host_echoing_an_encoded_key_does_not_leak_it(
    case: Case, encoding: str, keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    form = ENCODINGS[encoding](keys)
    async with httpx.AsyncClient(transport=EncodedEchoing(ENCODINGS[encoding])) as http:
        with pytest.raises(DecisionProviderError) as info:
            await case.provider(http).decide(case.request(), deadline())
    _assert_clean(info.value, form)
    assert form not in caplog.text
