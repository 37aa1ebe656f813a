"""OpenAI Decisions: the System One shape mapped to the array shape, and answers back."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from shared.errors import DecisionProviderError
from worker.providers import DecisionRequest, OpenAIDecisionsProvider
from worker.testing.faux import FauxProvider

from .support import FAST, STATE, deadline, questions


def _provider() -> tuple[OpenAIDecisionsProvider, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    inner = FauxProvider().transport()

    async def record(request: httpx.Request) -> httpx.Response:
        await request.aread()
        sent.append(request)
        return await inner.handle_async_request(request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(record))
    return OpenAIDecisionsProvider(http=http, base_url="http://faux.invalid", policy=FAST), sent


def test_questions_map_to_the_array_shape() -> None:
    provider, _ = _provider()
    prepared = provider.prepare(DecisionRequest(state={"ticket": STATE}, questions=questions()))
    body = json.loads(prepared.body)
    assert body["model"] == "gpt-6-luna"
    assert body["input"] == json.dumps({"ticket": STATE}, separators=(",", ":"), ensure_ascii=False)
    noul, choice, score = body["questions"]
    assert noul == {
        "type": "predicate",
        "name": "is_urgent",
        "instructions": "Does this convey urgency?\n\n"
        "Yes means: Explicitly time-sensitive\nNo means: No urgency expressed",
    }
    assert choice == {
        "type": "choice",
        "name": "department",
        "instructions": "Which team should handle this?",
        "choices": [
            {"value": "billing", "description": "Payments, invoicing, refunds"},
            {"value": "technical", "description": "Bugs, outages, integrations"},
            {"value": "sales"},
        ],
    }
    assert score["levels"] == [{"label": "Calm"}, {"label": "Frustrated"}, {"label": "Very angry"}]
    assert prepared.url == "http://faux.invalid/v1/decisions"


def test_object_instructions_go_as_json_text() -> None:
    provider, _ = _provider()
    q = {"q": {"type": "noul", "instructions": {"ask": "urgent?", "lang": "en"}}}
    body = json.loads(provider.prepare(DecisionRequest(state="s", questions=q)).body)
    assert body["questions"][0]["instructions"] == '{"ask":"urgent?","lang":"en"}'


async def test_answers_come_back_keyed_and_typed(keys: str) -> None:
    provider, sent = _provider()
    result = await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    assert sent[0].headers["authorization"] == f"Bearer {keys}"
    assert set(result.answers) == {"is_urgent", "department", "frustration"}
    assert result.answers["is_urgent"].type == "noul"
    assert isinstance(result.answers["is_urgent"].value, bool)
    assert result.answers["department"].value in {"billing", "technical", "sales"}
    assert result.answers["frustration"].label in {"Calm", "Frustrated", "Very angry"}
    # The faux reports usage.input_tokens; the price is ours, so the cost is an estimate.
    assert result.receipt.cost_basis == "estimate"
    tokens = max(1, len(sent[0].content) // 4)
    assert result.receipt.cost_usd == pytest.approx(tokens * 0.10 / 1e6)


def test_one_option_choice_is_refused_before_sending() -> None:
    provider, sent = _provider()
    q = {"q": {"type": "choice", "instructions": "x", "criteria": {"only": None}}}
    with pytest.raises(DecisionProviderError) as info:
        provider.prepare(DecisionRequest(state="s", questions=q))
    assert info.value.code == "invalid_request" and sent == []


async def _answered(body: dict[str, Any]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = OpenAIDecisionsProvider(http=http, base_url="http://x", policy=FAST)
        return await provider.decide(DecisionRequest(state="s", questions=questions()), deadline())


@pytest.mark.usefixtures("keys")
async def test_answer_twice_for_one_question_is_invalid() -> None:
    body = {"answers": [{"type": "predicate", "name": "is_urgent", "probability": 0.4}] * 2}
    with pytest.raises(DecisionProviderError) as info:
        await _answered(body)
    assert info.value.code == "invalid_response"


@pytest.mark.usefixtures("keys")
async def test_missing_answers_do_not_match_the_questions() -> None:
    # OpenAI refuses with {"type": "refusal", "name"}; a question left out is a mismatch,
    # paid for (booked at its estimate), never a refusal and never a value.
    body = {
        "id": "dec_1",
        "answers": [{"type": "predicate", "name": "is_urgent", "probability": 0.2}],
    }
    with pytest.raises(DecisionProviderError) as info:
        await _answered(body)
    error = info.value
    assert error.code == "invalid_response" and "frustration" in str(error)
    assert error.receipt is not None and error.receipt.status == "failed"
    assert error.receipt.decision_id == "dec_1"
    assert error.receipt.cost_basis == "estimate" and error.receipt.cost_usd > 0


@pytest.mark.usefixtures("keys")
async def test_explicit_refusal_is_refused() -> None:
    body = {
        "id": "dec_1",
        "answers": [
            {"type": "predicate", "name": "is_urgent", "probability": 0.2},
            {"type": "refusal", "name": "department"},
            {"type": "refusal", "name": "frustration"},
        ],
    }
    result = await _answered(body)
    assert result.answers["frustration"].refused and result.answers["frustration"].value is None
    assert result.answers["department"].refused
    assert result.answers["is_urgent"].value is False


@pytest.mark.usefixtures("keys")
async def test_boolean_choice_values_map_to_true_false_options() -> None:
    q = {"flag": {"type": "choice", "instructions": "x", "criteria": {"true": None, "false": None}}}
    answer = {
        "type": "choice",
        "name": "flag",
        "choice": True,
        "confidence": 0.5,
        "probabilities": [
            {"value": True, "probability": 0.75},
            {"value": False, "probability": 0.25},
        ],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"answers": [answer]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = OpenAIDecisionsProvider(http=http, base_url="http://x", policy=FAST)
        result = await provider.decide(DecisionRequest(state="s", questions=q), deadline())
    assert result.answers["flag"].value == "true"
    assert result.answers["flag"].probabilities == {"true": 0.75, "false": 0.25}


@pytest.mark.usefixtures("keys")
async def test_answers_not_an_array_are_invalid() -> None:
    with pytest.raises(DecisionProviderError) as info:
        await _answered({"answers": {"is_urgent": {"type": "noul", "noul": 0.5}}})
    assert info.value.code == "invalid_response"
