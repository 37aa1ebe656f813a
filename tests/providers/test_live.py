"""Live decisions on the paid APIs (a few tenths of a cent each run).

Each runs only with its provider's key variable set and is skipped otherwise, naming the
variable. ``OPENROUTER_LIVE_MODEL`` picks the OpenRouter model (default
``typesafe/jev-1.14``). ``test_parallel_three_decisions`` is the seed's live test: three
decisions (a noul, a choice, a score, one request each) on Parallel's paid REST path, about
$0.003 at list price.
"""

from __future__ import annotations

import os

import httpx
import pytest

from shared.settings import Settings
from worker.providers import DecisionRequest, ProviderRegistry

from .support import STATE, deadline, questions

PARALLEL_KEY = "PARALLEL_API_KEY"

pytestmark = pytest.mark.live

LIVE = [
    ("openrouter", "OPENROUTER_API_KEY"),
    ("typesafe", "TYPESAFE_API_KEY"),
    ("parallel", "PARALLEL_API_KEY"),
    ("openai", "OPENAI_API_KEY"),
]


@pytest.mark.parametrize(("name", "variable"), LIVE, ids=[n for n, _ in LIVE])
async def test_live_decision(name: str, variable: str) -> None:
    _require(variable, name)
    model = (
        os.environ.get("OPENROUTER_LIVE_MODEL", "typesafe/jev-1.14")
        if name == "openrouter"
        else None
    )
    async with httpx.AsyncClient() as http:
        registry = ProviderRegistry.from_settings(Settings(), http=http)
        try:
            result = await registry.get(name).decide(
                DecisionRequest(
                    state=STATE, questions=questions(), model=model, call_key="live/decide"
                ),
                deadline(60),
            )
        finally:
            await registry.aclose()
    receipt = result.receipt
    assert receipt.status == "answered" and receipt.transport_attempts >= 1
    assert set(result.answers) == {"is_urgent", "department", "frustration"}
    for answer in result.answers.values():
        assert answer.refused or answer.value is not None
    if name == "parallel":
        assert (receipt.cost_usd, receipt.cost_basis) == (
            Settings().parallel_list_price_usd,
            "estimate",
        )
        assert all(e.scope == "call" for e in receipt.evidence)
    if name == "openrouter":
        assert receipt.cost_basis in {"reported", None}
        assert receipt.decision_id


def test_parallel_skips_naming_its_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARALLEL_KEY, raising=False)
    with pytest.raises(pytest.skip.Exception, match=PARALLEL_KEY):
        _require(PARALLEL_KEY, "parallel")


def _require(variable: str, name: str) -> None:
    if not os.environ.get(variable, "").strip():
        pytest.skip(f"{variable} is not set: the live {name} test is skipped")


async def test_parallel_three_decisions() -> None:
    """Three decisions on the paid path, each its own request, booked at list price."""
    _require(PARALLEL_KEY, "parallel")
    price = Settings().parallel_list_price_usd
    receipts = []
    async with httpx.AsyncClient() as http:
        registry = ProviderRegistry.from_settings(Settings(), http=http)
        try:
            for qid, question in questions().items():
                result = await registry.get("parallel").decide(
                    DecisionRequest(
                        state=STATE, questions={qid: question}, call_key=f"live/{qid}"
                    ),
                    deadline(60),
                )
                answer = result.answers[qid]
                assert answer.refused or answer.value is not None
                receipts.append(result.receipt)
        finally:
            await registry.aclose()
    assert len(receipts) == 3 and all(r.status == "answered" for r in receipts)
    assert all((r.cost_usd, r.cost_basis) == (price, "estimate") for r in receipts)
    assert len({r.decision_id for r in receipts}) == 3, "three requests, three decision ids"
