"""Recorded responses, hand-made from the documented examples, replayed through the seam.

Each file in ``recordings/`` holds one case: the provider, the model asked, the response
(status, headers, body) and what the seam must make of it. The request is the wire facts'
own example (``support.QUESTIONS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.replies import Receipt

from .support import CASES, deadline

RECORDINGS = sorted((Path(__file__).parent / "recordings").glob("*.json"))
_BY_NAME = {case.name: case for case in CASES}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _response(recorded: dict[str, Any]) -> httpx.Response:
    if "body_text" in recorded:
        content = recorded["body_text"].encode()
    else:
        content = json.dumps(recorded["body"]).encode()
    return httpx.Response(recorded["status"], headers=recorded.get("headers", {}), content=content)


def test_every_recording_names_what_it_shows() -> None:
    assert len(RECORDINGS) >= 25
    for path in RECORDINGS:
        recording = _load(path)
        assert recording["shows"] and recording["provider"] in _BY_NAME, path.name
        assert {"status", "headers"} <= set(recording["response"]), path.name


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
async def test_replay(path: Path, keys: str) -> None:
    recording = _load(path)
    case = _BY_NAME[recording["provider"]]
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return _response(recording["response"])

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = case.provider(http)
        request = case.request(model=recording.get("model", case.model))
        expect = recording["expect"]
        if expect.get("error"):
            with pytest.raises(DecisionProviderError) as info:
                await provider.decide(request, deadline())
            _check_error(info.value, expect, recording, keys)
            receipt = info.value.receipt
        else:
            result = await provider.decide(request, deadline())
            receipt = result.receipt
            assert receipt.status == "answered"
            for qid, fields in expect.get("answers", {}).items():
                answer = result.answers[qid].model_dump()
                for key, value in fields.items():
                    assert answer[key] == pytest.approx(value), f"{qid}.{key}"
            for qid in expect.get("confidence_source_absent", []):
                assert qid not in receipt.confidence_source
            if "confidence_source" in expect:
                assert receipt.confidence_source == expect["confidence_source"]
    assert len(sent) == expect.get("requests", 1)
    _check_receipt(receipt, expect)


def _check_error(
    error: DecisionProviderError, expect: dict[str, Any], recording: dict[str, Any], key: str
) -> None:
    assert error.code == expect["error"]
    if "status_code" in expect:
        assert error.status_code == expect["status_code"]
    if "ref_id" in expect:
        assert error.ref_id == expect["ref_id"]
        assert error.receipt.ref_id == expect["ref_id"]
    text = str(error) + repr(error) + error.receipt.model_dump_json()
    for fragment in expect.get("message_contains", []):
        assert fragment in str(error)
    for fragment in expect.get("absent", []):
        assert fragment not in text
    assert key not in text
    if "body" in recording["response"]:
        # The body is dropped: none of its messages reaches the error or the receipt.
        for value in _messages(recording["response"]["body"]):
            assert value not in text, value


def _check_receipt(receipt: Receipt, expect: dict[str, Any]) -> None:
    for key in ("cost_usd", "cost_basis", "decision_id", "model", "status"):
        if key in expect:
            assert getattr(receipt, key) == pytest.approx(expect[key]), key
    if expect.get("cost_positive"):
        assert receipt.cost_usd is not None and receipt.cost_usd > 0
    if "evidence" in expect:
        assert len(receipt.evidence) == expect["evidence"]
    if "evidence_scope" in expect:
        assert {e.scope for e in receipt.evidence} == {expect["evidence_scope"]}
    if "evidence_first" in expect:
        first = receipt.evidence[0].model_dump()
        for key, value in expect["evidence_first"].items():
            assert first[key] == value


def _messages(value: Any) -> list[str]:
    """The free-text fields of an error body (where a host echoes input)."""
    if isinstance(value, dict):
        found = [
            v for k, v in value.items() if k in {"message", "flagged_input"} and isinstance(v, str)
        ]
        return found + [s for item in value.values() for s in _messages(item)]
    if isinstance(value, list):
        return [s for item in value for s in _messages(item)]
    return []
