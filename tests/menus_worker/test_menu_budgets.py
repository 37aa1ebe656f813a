"""Menu jobs under a budget: each model call reserves its worst case before it is sent.

A chat reply's tokens are unbounded unless the request bounds them, so a menu's call has a
known maximum only with ``DECISIONS_MENU_MAX_OUTPUT_TOKENS`` (sent as ``max_tokens``) and a
price for the runtime's dearest token. Without both, a menu job with ``budget_usd`` is
rejected naming them, and a daily ceiling on the runtime refuses its calls, unsent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.replies import EscalationMessage, RejectedMessage, ResultMessage
from shared.settings import Settings
from tests.menus_worker.support import Harness, menu_job
from worker.runtimes.chat import ChatConfig, ChatRuntime

TOKENS = 512
#: The faux chat's dearest token (its output), as an operator would configure it.
BOUNDS = {"menu_max_output_tokens": TOKENS, "max_price_per_mtok_usd": {"faux": 0.60}}


async def test_each_call_reserves_its_worst_case_and_the_budget_keeps_what_it_cost(
    tmp_path: Path,
) -> None:
    harness = Harness.create(tmp_path, **BOUNDS)
    harness.pick("m1", "pick.0", "close")
    assert await harness.run(menu_job("m1", batch="mb", budget_usd=1.0)) == "result"
    result = harness.terminal("m1")
    assert isinstance(result, ResultMessage)
    [receipt] = [r for r in result.receipts if r.step == "pick.0"]
    assert receipt.cost_basis == "reported" and receipt.cost_usd
    call = harness.ledger.get_call("m1", "pick.0")
    assert call is not None and call.budget_scopes == "batch:mb"
    # Reserved: the request's bytes and the reply's bound at the faux's dearest token.
    assert call.reserved_usd is not None and call.reserved_usd > TOKENS * 0.60 / 1e6
    budget = harness.ledger.budget("mb")
    assert budget is not None
    assert budget.committed_usd == pytest.approx(receipt.cost_usd)  # settled to its cost
    assert budget.calls_in_flight == 0


async def test_a_call_the_budget_cannot_take_is_never_sent(tmp_path: Path) -> None:
    harness = Harness.create(tmp_path, **BOUNDS)
    harness.pick("m2", "pick.0", "close")
    # Less than the reply's bound alone costs (512 tokens at $0.60 a million).
    assert await harness.run(menu_job("m2", batch="small", budget_usd=0.0001)) == "escalation"
    escalation = harness.terminal("m2")
    assert isinstance(escalation, EscalationMessage)
    assert escalation.reason == "budget_exhausted" and "budget batch:small" in escalation.detail
    assert harness.model_calls("m2") == {}  # nothing reached the model


async def test_without_a_bound_on_the_reply_a_budgeted_menu_is_rejected_naming_it(
    tmp_path: Path,
) -> None:
    harness = Harness.create(tmp_path)
    assert await harness.run(menu_job("m3", batch="mb", budget_usd=1.0)) == "rejected"
    rejection = harness.terminal("m3")
    assert isinstance(rejection, RejectedMessage)
    [problem] = [p for p in rejection.problems if p["field"] == "budget_usd"]
    assert "DECISIONS_MENU_MAX_OUTPUT_TOKENS" in problem["message"]
    assert "DECISIONS_MAX_PRICE_PER_MTOK_USD" in problem["message"]
    assert harness.model_calls("m3") == {}


@pytest.mark.parametrize("bounded", [True, False])
async def test_a_daily_ceiling_on_the_runtime_holds_its_menu_calls(
    tmp_path: Path, bounded: bool
) -> None:
    extra = BOUNDS if bounded else {}
    harness = Harness.create(tmp_path, daily_ceiling_usd={"faux": 5.0}, **extra)
    harness.pick("d1", "pick.0", "close")
    outcome = await harness.run(menu_job("d1"))
    if bounded:
        assert outcome == "result" and harness.model_calls("d1") == {"pick.0": 1}
        return
    assert outcome == "escalation" and harness.model_calls("d1") == {}
    escalation = harness.terminal("d1")
    assert isinstance(escalation, EscalationMessage) and escalation.reason == "budget_exhausted"
    assert "DECISIONS_MENU_MAX_OUTPUT_TOKENS" in escalation.detail


def runtime(config: ChatConfig, settings: Settings) -> ChatRuntime:
    import httpx

    return ChatRuntime(config.bounded(settings), http=httpx.AsyncClient())


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (ChatConfig(name="openrouter", base_url="http://h", key_env=None), "max_tokens"),
        (
            ChatConfig.openai(Settings(_env_file=None)),  # type: ignore[call-arg]
            "max_completion_tokens",
        ),
    ],
)
def test_the_bound_is_sent_in_the_field_the_host_takes(config: ChatConfig, field: str) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, menu_max_output_tokens=300, max_price_per_mtok_usd={config.name: 10.0}
    )
    bounded = runtime(config, settings)
    prepared = bounded.prepare([{"role": "user", "content": "hi"}], model="m")
    assert json.loads(prepared.body)[field] == 300
    assert bounded.worst_cost(prepared) == pytest.approx((len(prepared.body) + 300) * 10 / 1e6)
    unbounded = runtime(config, Settings(_env_file=None))  # type: ignore[call-arg]
    plain = unbounded.prepare([{"role": "user", "content": "hi"}], model="m")
    assert field not in json.loads(plain.body) and unbounded.worst_cost(plain) is None
    assert "DECISIONS_MENU_MAX_OUTPUT_TOKENS" in (unbounded.config.unbounded or "")
    assert "DECISIONS_MAX_PRICE_PER_MTOK_USD" in (unbounded.config.unbounded or "")


async def test_a_handlers_own_call_a_budget_refuses_is_not_sent_nor_said_resumable(
    tmp_path: Path,
) -> None:
    """The handler is told, as a configuration failure, with the budget's figures; not the
    way on of a budget_exhausted job (found by an attack: the handler_failed escalation
    said to run ``decisions budget resume``, which reruns only budget_exhausted jobs)."""
    from tests.menus_worker.support import OPTIONS
    from worker.testing.faux import FauxChatReply

    harness = Harness.create(tmp_path, **BOUNDS)
    options = [{"kind": "handler", "name": "ask", "handler": "t_ask"}, OPTIONS[2]]
    # The handler's question (inside the reply's bound) makes its own call's worst case
    # larger than what the pick leaves of the budget: $0.00062 reserved for the pick,
    # $0.0003 booked, then $0.0015 asked for the handler's call.
    harness.reply("h1", "pick.0", FauxChatReply(pick="ask", args={"question": "x" * 1_800}))
    job = menu_job("h1", options=options, batch="hb", budget_usd=0.001)
    assert await harness.run(job) == "escalation"
    escalation = harness.terminal("h1")
    assert isinstance(escalation, EscalationMessage)
    assert escalation.reason == "handler_failed"
    assert "budget batch:hb cannot take this call" in escalation.detail
    assert "nothing was sent" in escalation.detail and "resume" not in escalation.detail
    assert harness.model_calls("h1") == {"pick.0": 1}
