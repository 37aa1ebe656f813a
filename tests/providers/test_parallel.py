"""Parallel's own points of the seed: limits, descriptions, modes and models, cost, evidence."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from shared.errors import DecisionProviderError
from shared.settings import Settings
from worker.providers import DecisionRequest, ParallelProvider, ProviderRegistry, rendered_length
from worker.providers.parallel import PARALLEL_KEY_HEADER
from worker.testing.faux import FauxProvider

from .support import FAST, QUESTIONS, STATE, deadline, questions


def _provider(
    handler: Any = None, *, modes: tuple[str, ...] = ("fast",)
) -> tuple[ParallelProvider, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    faux = FauxProvider()
    inner = faux.transport()

    async def record(request: httpx.Request) -> httpx.Response:
        await request.aread()
        sent.append(request)
        if handler is not None:
            return handler(request)
        return await inner.handle_async_request(request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(record))
    return ParallelProvider(
        http=http, base_url="http://faux.invalid", modes=modes, policy=FAST
    ), sent


def _refused(provider: ParallelProvider, **changes: Any) -> DecisionProviderError:
    fields: dict[str, Any] = {"state": STATE, "questions": questions()}
    fields.update(changes)
    with pytest.raises(DecisionProviderError) as info:
        provider.prepare(DecisionRequest(**fields))
    assert info.value.code == "invalid_request"
    return info.value


def _noul(i: int) -> dict[str, Any]:
    return {"type": "noul", "instructions": f"question {i}?"}


def test_question_count_limits() -> None:
    provider, _ = _provider()
    provider.prepare(DecisionRequest(state="s", questions={f"q{i}": _noul(i) for i in range(100)}))
    error = _refused(provider, questions={f"q{i}": _noul(i) for i in range(101)})
    assert error.field == "questions" and "101" in str(error)
    assert _refused(provider, questions={}).field == "questions"


@pytest.mark.parametrize(("n", "ok"), [(1, False), (2, True), (255, True), (256, False)])
def test_choice_option_limits(n: int, ok: bool) -> None:
    provider, _ = _provider()
    question = {"type": "choice", "instructions": "x", "criteria": {f"o{i}": "d" for i in range(n)}}
    if ok:
        provider.prepare(DecisionRequest(state="s", questions={"q": question}))
    else:
        assert _refused(provider, questions={"q": question}).field == "questions.q.criteria"


@pytest.mark.parametrize(("n", "ok"), [(1, False), (2, True), (10, True), (11, False)])
def test_score_level_limits(n: int, ok: bool) -> None:
    provider, _ = _provider()
    question = {"type": "score", "instructions": "x", "criteria": [f"l{i}" for i in range(n)]}
    if ok:
        provider.prepare(DecisionRequest(state="s", questions={"q": question}))
    else:
        assert _refused(provider, questions={"q": question}).field == "questions.q.criteria"


def test_rendered_question_limit_is_characters_of_the_question_as_sent() -> None:
    provider, _ = _provider()
    base = {"type": "noul", "instructions": ""}
    overhead = rendered_length(base)
    at_limit = {"type": "noul", "instructions": "é" * (5_000 - overhead)}
    assert rendered_length(at_limit) == 5_000
    provider.prepare(DecisionRequest(state="s", questions={"q": at_limit}))
    over = {"type": "noul", "instructions": "é" * (5_001 - overhead)}
    assert _refused(provider, questions={"q": over}).field == "questions.q"


def test_rendered_size_counts_the_filled_in_descriptions() -> None:
    # Option names repeated as their descriptions count against the 5,000 characters.
    provider, _ = _provider()
    names = {f"option-{i:03d}-{'x' * 10}": None for i in range(150)}
    question = {"type": "choice", "instructions": "pick", "criteria": names}
    assert rendered_length(question) < 5_000
    assert _refused(provider, questions={"q": question}).field == "questions.q"


def test_state_byte_limit() -> None:
    provider, _ = _provider()
    provider.prepare(DecisionRequest(state="a" * 96_000, questions={"q": _noul(0)}))
    assert _refused(provider, state="a" * 96_001).field == "state"
    # Bytes, not characters: 32,001 three-byte characters are 96,003 bytes.
    assert _refused(provider, state="€" * 32_001).field == "state"
    assert _refused(provider, state={"text": "a" * 96_000}).field == "state"


async def test_option_without_description_is_described_by_its_name(keys: str) -> None:
    provider, sent = _provider()
    await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    body = json.loads(sent[0].content)
    assert body["questions"]["department"]["criteria"] == {
        "billing": "Payments, invoicing, refunds",
        "technical": "Bugs, outages, integrations",
        "sales": "sales",
    }
    assert body["mode"] == "fast"
    assert sent[0].headers[PARALLEL_KEY_HEADER] == keys
    assert "authorization" not in sent[0].headers


def test_models_and_modes() -> None:
    provider, _ = _provider(modes=("fast", "deep"))
    assert provider.models() == ("parallel-fast", "parallel-deep")
    assert provider.default_model() == "parallel-fast"
    deep = provider.prepare(
        DecisionRequest(state="s", questions=dict(QUESTIONS), model="parallel-deep")
    )
    assert json.loads(deep.body)["mode"] == "deep" and deep.model == "parallel-deep"
    first = provider.prepare(DecisionRequest(state="s", questions=dict(QUESTIONS)))
    assert json.loads(first.body)["mode"] == "fast"


@pytest.mark.parametrize("model", ["parallel-deep", "gpt-6-luna", "fast"])
def test_pinning_another_model_is_refused_before_sending(model: str) -> None:
    provider, sent = _provider()
    error = _refused(provider, model=model)
    assert error.field == "model" and sent == []


def test_registry_refuses_another_model_at_submit_time() -> None:
    registry = ProviderRegistry.from_settings(Settings(parallel_modes=["fast"]))
    assert registry.check("parallel", None) == []
    assert registry.check("parallel", "parallel-fast") == []
    problems = registry.check("parallel", "parallel-pro")
    assert [p.field for p in problems] == ["model"] and "parallel-fast" in problems[0].message


def test_parallel_takes_no_images() -> None:
    provider, _ = _provider()
    error = _refused(provider, assets={"i1": b"\x89PNG\r\n\x1a\n"})
    assert error.field == "assets"


async def test_answered_cost_is_list_price_and_evidence_is_call_scoped(keys: str) -> None:
    provider, _ = _provider()
    provider.list_price_usd = 0.0025
    result = await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    assert (result.receipt.cost_usd, result.receipt.cost_basis) == (0.0025, "estimate")
    assert result.receipt.decision_id and result.receipt.decision_id.startswith("dec_")
    assert result.receipt.evidence and all(e.scope == "call" for e in result.receipt.evidence)
    assert result.receipt.model == "parallel-fast"


async def test_api_key_given_directly(no_keys: None) -> None:
    sent: list[httpx.Request] = []
    inner = FauxProvider().transport()

    async def record(request: httpx.Request) -> httpx.Response:
        await request.aread()
        sent.append(request)
        return await inner.handle_async_request(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as http:
        provider = ParallelProvider(
            http=http, base_url="http://faux.invalid", policy=FAST, api_key="sk-direct"
        )
        assert provider.key_is_set
        await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    assert sent[0].headers[PARALLEL_KEY_HEADER] == "sk-direct"
    assert "sk-direct" not in repr(provider.__dict__)
