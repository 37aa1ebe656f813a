"""Menu jobs through the runner: results, rejections and escalations, with the faux counting
every model call and the handlers counting every run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.replies import EscalationMessage, RejectedMessage, ResultMessage
from shared.setting_types import ChatHost
from tests.menus_worker import handlers
from tests.menus_worker.support import OPTIONS, Harness, menu_job
from tests.providers.loopback import LoopbackServer, Reply
from worker.kinds.menus import check_menu_answer
from worker.testing.faux import FauxBehaviour, FauxChatReply, FauxToolCall


def tool_turn(name: str, args: dict[str, Any]) -> FauxChatReply:
    return FauxChatReply(tool_calls=[FauxToolCall(name=name, arguments=args)])


def result_of(harness: Harness, job_id: str) -> ResultMessage:
    message = harness.terminal(job_id)
    assert isinstance(message, ResultMessage), message
    assert message.kind == "menu"
    return message


def escalation_of(harness: Harness, job_id: str) -> EscalationMessage:
    message = harness.terminal(job_id)
    assert isinstance(message, EscalationMessage), message
    assert message.kind == "menu"
    return message


async def test_a_handler_pick_runs_the_handler_once_with_context_injected(
    harness: Harness,
) -> None:
    harness.pick("j1", "pick.0", "refund", {"order_id": "A-1", "amount": 12, "customer": "Eve"})
    assert await harness.run(menu_job("j1")) == "result"
    result = result_of(harness, "j1")
    # The model's "customer" is ignored: injected values win; the int is a float.
    assert result.value == {"refunded": "A-1", "amount": 12.0, "customer": "Ana"}
    assert handlers.runs_of("t_refund") == [{"order_id": "A-1", "amount": 12.0, "customer": "Ana"}]
    assert harness.model_calls("j1") == {"pick.0": 1}
    assert [(r.step, r.provider, r.status) for r in result.receipts] == [
        ("pick.0", "faux", "answered"),
        ("handler", "handler", "answered"),
    ]
    assert result.receipts[0].cost_basis == "reported" and result.receipts[0].cost_usd
    assert harness.call_statuses("j1") == {"pick.0": "answered", "handler": "answered"}
    # Injected values are never stored in the ledger.
    assert "Ana" not in str(harness.stored("j1", "handler")["args"])


async def test_value_and_schema_picks_resolve_without_a_handler_call(harness: Harness) -> None:
    harness.pick("v1", "pick.0", "close")
    harness.pick("s1", "pick.0", "plan", {"steps": [{"action": "call", "target": "Ana", "x": 1}]})
    assert await harness.run(menu_job("v1")) == "result"
    assert await harness.run(menu_job("s1")) == "result"
    assert result_of(harness, "v1").value == {"status": "closed"}
    # Extra fields are dropped at every level.
    assert result_of(harness, "s1").value == {
        "decision": "plan",
        "steps": [{"action": "call", "target": "Ana"}],
    }
    assert harness.call_statuses("v1") == {"pick.0": "answered"}
    assert handlers.RUNS == []


async def test_the_deterministic_faux_pick_is_always_valid(harness: Harness) -> None:
    # No script: the faux picks by a hash of the messages, from the menu's Call lines.
    ids = [f"d{i}" for i in range(12)]
    for job_id in ids:
        assert await harness.run(menu_job(job_id)) == "result"
    picked = {str(result_of(harness, j).value) for j in ids}
    assert len(picked) > 1
    assert all(harness.model_calls(j) == {"pick.0": 1} for j in ids)


async def test_an_unregistered_handler_is_rejected_before_any_model_call(
    harness: Harness,
) -> None:
    options = [*OPTIONS[:2], {"kind": "handler", "name": "wire", "handler": "t_wire_money"}]
    job = menu_job("r1", options=options, work={"tools": ["t_lookup", "t_nope"]})
    assert await harness.run(job) == "rejected"
    message = harness.terminal("r1")
    assert isinstance(message, RejectedMessage)
    fields = [p["field"] for p in message.problems]
    assert fields == ["options[2].handler", "work.tools[1]"]
    assert "t_wire_money" in message.problems[0]["message"]
    assert harness.faux.total() == 0
    assert harness.ledger.get_job("r1") is None


async def test_a_missing_context_key_and_an_unknown_runtime_are_rejected(
    harness: Harness,
) -> None:
    assert await harness.run(menu_job("c1", context={})) == "rejected"
    assert await harness.run(menu_job("c2", runtime={"provider": "nowhere"})) == "rejected"
    first, second = harness.terminal("c1"), harness.terminal("c2")
    assert isinstance(first, RejectedMessage) and isinstance(second, RejectedMessage)
    assert [p["field"] for p in first.problems] == ["context"]
    assert "customer" in first.problems[0]["message"]
    assert [p["field"] for p in second.problems] == ["runtime.provider"]
    assert harness.faux.total() == 0


async def test_retries_exhausted_escalate_menu_unparseable_and_a_reviewer_resolves_it(
    harness: Harness,
) -> None:
    harness.reply("u1", "pick.0", FauxChatReply(content="I would refund it, I think."))
    harness.pick("u1", "pick.1", "refund", {"order_id": "A-1"})  # amount missing
    assert await harness.run(menu_job("u1")) == "escalation"
    message = escalation_of(harness, "u1")
    assert message.reason == "menu_unparseable"
    assert harness.model_calls("u1") == {"pick.0": 1, "pick.1": 1}
    context = message.context
    assert context["menu"].startswith("Options (pick exactly one")
    assert "- refund(order_id: str, amount: float)" in context["menu"]
    assert '"call": "refund"' in context["last_reply"]
    assert [e["kind"] for e in context["errors"]] == ["no_action", "missing_required"]
    assert context["options"] == OPTIONS
    assert "missing_required" in message.detail
    assert handlers.RUNS == []

    assert check_menu_answer(message, {"call": "close"}) == {
        "call": "close",
        "args": {},
        "value": {"status": "closed"},
    }
    answer = {"call": "refund", "args": {"order_id": "A-1", "amount": 3}}
    resolved = check_menu_answer(message, answer)
    assert resolved == {
        "call": "refund",
        "args": {"order_id": "A-1", "amount": 3.0},
        "handler": "t_refund",
    }
    assert handlers.RUNS == []  # a reviewer's pick never runs the handler


async def test_max_retries_zero_asks_once(harness: Harness) -> None:
    harness.reply("z1", "pick.0", FauxChatReply(content="no pick here"))
    assert await harness.run(menu_job("z1", max_retries=0)) == "escalation"
    assert escalation_of(harness, "z1").reason == "menu_unparseable"
    assert harness.model_calls("z1") == {"pick.0": 1}


async def test_a_refusal_and_a_truncation_are_told_apart_from_no_action(harness: Harness) -> None:
    harness.reply("f1", "pick.0", FauxChatReply(refusal="I won't route tickets."))
    harness.reply("f1", "pick.1", FauxChatReply(pick="close", finish_reason="length"))
    assert await harness.run(menu_job("f1")) == "escalation"
    message = escalation_of(harness, "f1")
    assert [e["kind"] for e in message.context["errors"]] == ["refusal", "truncated"]
    assert message.context["last_reply_finish_reason"] == "length"


async def test_a_hosts_refusal_and_finish_reason_are_cut_in_the_escalation(
    harness: Harness,
) -> None:
    # Found by an attack: a 4,000,000-character refusal went whole into the escalation's
    # context (4 MB on the reply stream and in the ledger), as the detail had before it.
    huge = FauxChatReply(refusal="R" * 4_000_000, finish_reason="x" * 100_000)
    harness.reply("f2", "pick.0", huge)
    assert await harness.run(menu_job("f2", max_retries=0)) == "escalation"
    message = escalation_of(harness, "f2")
    assert len(message.to_json()) < 20_000
    assert message.context["last_reply_refusal"].startswith("RRR")


async def test_a_handler_that_raises_escalates_handler_failed_and_the_model_is_not_asked_again(
    harness: Harness,
) -> None:
    options = [*OPTIONS, {"kind": "handler", "name": "pay", "handler": "t_explode"}]
    harness.pick("h1", "pick.0", "pay", {"reason": "refund"})
    assert await harness.run(menu_job("h1", options=options)) == "escalation"
    message = escalation_of(harness, "h1")
    assert message.reason == "handler_failed"
    assert "RuntimeError: payments system is down (refund)" in message.detail
    assert harness.model_calls("h1") == {"pick.0": 1}
    assert len(handlers.runs_of("t_explode")) == 1
    assert harness.call_statuses("h1") == {"pick.0": "answered", "handler": "failed"}
    # Delivered again: the stored failure stands; nothing is asked or run again.
    assert await harness.run(menu_job("h1", options=options)) == "escalation"
    assert harness.model_calls("h1") == {"pick.0": 1}
    assert len(handlers.runs_of("t_explode")) == 1


async def test_a_work_turn_calls_tools_then_picks(harness: Harness) -> None:
    job = menu_job("w1", work={"tools": ["t_lookup"], "max_steps": 3})
    harness.reply("w1", "turn.0", tool_turn("t_lookup", {"order_id": "A-9"}))
    harness.pick("w1", "turn.1", "escalate", {"team": "billing", "summary": "lost parcel"})
    assert await harness.run(job) == "result"
    assert result_of(harness, "w1").value == {"escalated": "billing"}
    assert harness.model_calls("w1") == {"turn.0": 1, "turn.1": 1}
    assert handlers.runs_of("t_lookup") == [{"order_id": "A-9"}]
    assert harness.call_statuses("w1") == {
        "turn.0": "answered",
        "tool.0": "answered",
        "turn.1": "answered",
        "handler": "answered",
    }
    tool = harness.stored("w1", "tool.0")
    assert tool["turn"] == "turn.0" and "lost in transit" in tool["content"]


async def test_a_tool_that_raises_is_handler_failed(harness: Harness) -> None:
    job = menu_job("w2", work={"tools": ["t_explode"], "max_steps": 3})
    harness.reply("w2", "turn.0", tool_turn("t_explode", {"reason": "x"}))
    assert await harness.run(job) == "escalation"
    assert escalation_of(harness, "w2").reason == "handler_failed"
    assert harness.model_calls("w2") == {"turn.0": 1}


async def test_a_handler_s_own_model_calls_are_ledger_calls(harness: Harness) -> None:
    options = [{"kind": "handler", "name": "ask", "handler": "t_ask"}, OPTIONS[2]]
    harness.pick("a1", "pick.0", "ask", {"question": "Which team handles refunds?"})
    harness.reply("a1", "handler.call.0", FauxChatReply(content="Billing does."))
    assert await harness.run(menu_job("a1", options=options)) == "result"
    result = result_of(harness, "a1")
    assert result.value == "Billing does."
    assert harness.model_calls("a1") == {"pick.0": 1, "handler.call.0": 1}
    assert [r.step for r in result.receipts] == ["pick.0", "handler.call.0", "handler"]


async def test_kwargs_handlers_receive_the_model_s_extra_fields(harness: Harness) -> None:
    options = [{"kind": "handler", "name": "note", "handler": "t_extra"}]
    harness.pick("k1", "pick.0", "note", {"note": "n", "priority": 2})
    assert await harness.run(menu_job("k1", options=options)) == "result"
    assert result_of(harness, "k1").value == {"note": "n", "priority": 2}


async def test_a_runtime_failure_escalates_like_the_decide_path(harness: Harness) -> None:
    def fail(job_id: str, mode: str, **extra: Any) -> None:
        overrides = dict(harness.faux.behaviour.overrides)
        overrides[f"{job_id}/pick.0"] = FauxBehaviour(mode=mode, **extra)
        harness.faux.update_behaviour(overrides=overrides)

    fail("e1", "status", status_code=503)
    fail("e2", "drop_before_read")
    fail("e3", "status", status_code=401)
    assert await harness.run(menu_job("e1")) == "escalation"
    assert await harness.run(menu_job("e2")) == "escalation"
    assert await harness.run(menu_job("e3")) == "escalation"
    reasons = {j: escalation_of(harness, j).reason for j in ("e1", "e2", "e3")}
    assert reasons == {
        "e1": "decision_interrupted",
        "e2": "decision_interrupted",
        "e3": "provider_error",
    }
    statuses = {j: harness.call_statuses(j)["pick.0"] for j in ("e1", "e2", "e3")}
    assert statuses == {"e1": "unknown", "e2": "unknown", "e3": "failed"}
    # The unknown one is never sent again.
    assert await harness.run(menu_job("e1")) == "escalation"
    assert harness.model_calls("e1") == {"pick.0": 1}


async def test_a_job_past_its_deadline_sends_nothing(harness: Harness) -> None:
    assert await harness.run(menu_job("late", deadline="2000-01-01T00:00:00Z")) == "escalation"
    assert escalation_of(harness, "late").reason == "deadline_exceeded"
    assert harness.faux.total() == 0


async def test_the_key_never_reaches_a_message_the_ledger_or_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    canary = "sk-menus-canary-0c7f2e"
    monkeypatch.setenv("MENUS_CANARY_KEY", canary)
    completion = {
        "id": "gen-1",
        "choices": [{"finish_reason": "stop", "message": {"content": '{"call": "close"}'}}],
    }
    failing = Reply(status=401, body={"error": {"type": canary}})  # a host that echoes it
    async with LoopbackServer(Reply(body=completion), failing) as server:
        host = ChatHost(base_url=server.url, key_env="MENUS_CANARY_KEY", default_model="m")
        harness = Harness.create(tmp_path, chat_hosts={"loop": host})
        assert await harness.run(menu_job("s1", runtime={"provider": "loop"})) == "result"
        assert await harness.run(menu_job("s2", runtime={"provider": "loop"})) == "escalation"
    assert f"bearer {canary}" in server.heads[0].decode().lower()
    assert all(canary not in m.message for m in harness.sink.snapshot())
    for job_id in ("s1", "s2"):
        for call in harness.ledger.calls(job_id):
            assert canary not in f"{call.receipt_json}{call.outcome_json}{call.error_code}"
    out = capsys.readouterr()
    assert canary not in out.out + out.err
