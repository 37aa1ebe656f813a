"""A reviewer's answer to a menu escalation: parsed and validated by the engine, from what the
escalation carries (no handler code needed), every bad field named."""

from __future__ import annotations

import pytest

from shared.errors import FieldProblem, ResolutionInvalid
from shared.menus import build_menu
from shared.replies import EscalationMessage
from tests.menus_worker.support import OPTIONS, Harness, menu_job
from worker.kinds.menus import check_menu_answer
from worker.testing.faux import FauxChatReply


async def escalated(harness: Harness) -> EscalationMessage:
    harness.reply("res", "pick.0", FauxChatReply(content="?"))
    harness.reply("res", "pick.1", FauxChatReply(content="??"))
    assert await harness.run(menu_job("res")) == "escalation"
    message = harness.terminal("res")
    assert isinstance(message, EscalationMessage)
    return message


def problems(message: EscalationMessage, answer: object) -> list[FieldProblem]:
    with pytest.raises(ResolutionInvalid) as caught:
        check_menu_answer(message, answer)
    return caught.value.problems


async def test_answers_are_checked_like_a_model_reply(harness: Harness) -> None:
    message = await escalated(harness)
    assert message.context["handler_params"]["refund"] == {
        "handler": "t_refund",
        "accepts_extra": False,
        "params": [
            {"name": "order_id", "required": True, "type": {"type": "str"}},
            {"name": "amount", "required": True, "type": {"type": "float"}},
        ],
    }
    assert check_menu_answer(message, "close")["value"] == {"status": "closed"}
    # The call-key aliases and the flat form are a pick too.
    assert check_menu_answer(message, {"action": "close"})["call"] == "close"
    plan = check_menu_answer(
        message, {"call": "plan", "args": {"steps": [{"action": "call", "target": "Ana", "z": 0}]}}
    )
    assert plan["value"] == {"decision": "plan", "steps": [{"action": "call", "target": "Ana"}]}

    unknown = problems(message, {"call": "wire_money"})
    assert [p.field for p in unknown] == ["answer.call"]
    assert "valid options: refund, escalate, close, plan" in unknown[0].message
    nested = problems(message, {"call": "plan", "args": {"steps": [{"action": "fax"}]}})
    assert [p.field for p in nested] == [
        "answer.args.steps[0].action",
        "answer.args.steps[0].target",
    ]
    assert nested[0].message.startswith("enum_violation")
    typed = problems(message, {"call": "refund", "args": {"order_id": 7, "amount": True}})
    assert [p.field for p in typed] == ["answer.args.order_id", "answer.args.amount"]
    assert [p.field for p in problems(message, ["close"])] == ["answer"]
    assert [p.field for p in problems(message, "not an option")] == ["answer"]
    assert [p.field for p in problems(message, {"call": ["close"]})] == ["answer.call"]


def test_a_menu_without_handler_params_still_checks_value_and_schema_options() -> None:
    message = EscalationMessage(
        job_id="m",
        kind="menu",
        reason="menu_unparseable",
        context={"options": [*OPTIONS[2:], {"kind": "handler", "name": "h", "handler": "x"}]},
    )
    assert check_menu_answer(message, {"call": "h", "args": {"any": 1}}) == {
        "call": "h",
        "args": {"any": 1},
        "handler": "x",
    }
    assert [p.field for p in problems(message, {"call": "plan"})] == ["answer.args.steps"]
    broken = EscalationMessage(job_id="m", kind="menu", reason="menu_unparseable", context={})
    assert [p.field for p in problems(broken, "close")] == ["answer"]


def test_the_rebuilt_menu_is_the_menu_the_model_saw() -> None:
    from worker.kinds.menus import menu_of_escalation

    message = EscalationMessage(
        job_id="m", kind="menu", reason="handler_failed", context={"options": OPTIONS[2:]}
    )
    rebuilt = menu_of_escalation(message)
    from shared.menus import menu_from_json

    assert rebuilt.text == build_menu(menu_from_json(OPTIONS[2:], {})).text


async def test_a_nul_in_an_answer_is_refused_by_its_field(harness: Harness) -> None:
    """Found by an attack: a reviewer's ``"a\\x00b"`` was published; a producer storing the
    answer in PostgreSQL (text, jsonb) cannot, and job text refuses it everywhere else."""
    message = await escalated(harness)
    nul = problems(message, {"call": "refund", "args": {"order_id": "a\x00b", "amount": 1.0}})
    assert [p.field for p in nul] == ["answer.args.order_id"]
    assert "NUL" in nul[0].message
    deep = problems(
        message, {"call": "plan", "args": {"steps": [{"action": "call", "target": "A\x00"}]}}
    )
    assert [p.field for p in deep] == ["answer.args.steps[0].target"]
    # Other control characters a text may hold (a line break) stay.
    kept = check_menu_answer(message, {"call": "refund", "args": {"order_id": "a\nb", "amount": 1}})
    assert kept["args"]["order_id"] == "a\nb"
