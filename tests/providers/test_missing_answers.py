"""A question left out of the answers: refused or ``invalid_response``, per provider.

The rule each provider follows is one table, in ``shared.decoding``'s docstring
(the README points to it); these tests keep that table and the providers' classes equal,
and run the rule through a provider end to end.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from shared import decoding
from shared.errors import DecisionProviderError
from worker.providers import (
    DecisionRequest,
    OpenAIDecisionsProvider,
    ParallelProvider,
    SystemOneProvider,
)
from worker.providers.httpbase import HttpDecisionProvider
from worker.providers.systemone import SystemOneConfig
from worker.testing.faux import FauxBehaviour, FauxProvider

from .support import FAST, STATE, deadline, questions

#: The table's first column, to the class that implements it.
CLASSES: dict[str, type[HttpDecisionProvider]] = {
    "parallel": ParallelProvider,
    "openai": OpenAIDecisionsProvider,
    "systemone": SystemOneProvider,
}


def _table() -> dict[str, str]:
    doc = decoding.__doc__ or ""
    rows = re.findall(r"^\s+``(\w+)``\s+``(\w+)``", doc, flags=re.MULTILINE)
    return dict(rows)


def test_the_table_and_the_code_agree() -> None:
    table = _table()
    assert table, "the table in shared.decoding is gone"
    assert set(table) == set(CLASSES)
    for name, rule in table.items():
        assert CLASSES[name].missing_answer == rule, name


def test_every_provider_class_is_in_the_table() -> None:
    def subclasses(cls: type) -> set[type]:
        return {s for c in cls.__subclasses__() for s in {c} | subclasses(c)}

    assert subclasses(HttpDecisionProvider) <= set(CLASSES.values())


def _dropping(inner: httpx.AsyncBaseTransport, drop: str) -> httpx.MockTransport:
    """The faux's answer with one question left out of ``answers``."""

    async def handle(request: httpx.Request) -> httpx.Response:
        response = await inner.handle_async_request(request)
        body = json.loads(await response.aread())
        answers = body["answers"]
        if isinstance(answers, dict):
            answers.pop(drop)
        else:
            body["answers"] = [a for a in answers if a.get("name") != drop]
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


def _provider(name: str, transport: httpx.AsyncBaseTransport) -> HttpDecisionProvider:
    http = httpx.AsyncClient(transport=transport)
    if name == "parallel":
        return ParallelProvider(http=http, base_url="http://faux.invalid", policy=FAST)
    if name == "openai":
        return OpenAIDecisionsProvider(http=http, base_url="http://faux.invalid", policy=FAST)
    config = SystemOneConfig(
        name="faux", base_url="http://faux.invalid", key_env=None, default_model="jev-latest"
    )
    return SystemOneProvider(config, http=http, policy=FAST)


async def _decide(provider: HttpDecisionProvider) -> Any:
    return await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("name", ["parallel", "openai"])
async def test_left_out_question_is_invalid_response_where_refusals_are_explicit(
    name: str,
) -> None:
    provider = _provider(name, _dropping(FauxProvider().transport(), "department"))
    with pytest.raises(DecisionProviderError) as info:
        await _decide(provider)
    error = info.value
    assert error.code == "invalid_response" and "department" in str(error)
    # Answered, so paid: the ledger books it failed, at the estimate, never a refusal.
    assert error.receipt is not None and error.receipt.status == "failed"
    assert error.receipt.cost_basis == "estimate"


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("name", ["parallel", "openai", "systemone"])
async def test_each_providers_own_refusal_is_a_refusal(name: str) -> None:
    faux = FauxProvider(FauxBehaviour(mode="refuse", refuse_questions=("department",)))
    result = await _decide(_provider(name, faux.transport()))
    assert result.answers["department"].refused
    assert result.answers["department"].value is None
    assert not result.answers["is_urgent"].refused


@pytest.mark.usefixtures("keys")
async def test_left_out_question_is_a_refusal_on_system_one() -> None:
    provider = _provider("systemone", _dropping(FauxProvider().transport(), "department"))
    result = await _decide(provider)
    assert result.answers["department"].refused and result.answers["department"].value is None
    assert result.receipt.status == "answered"
