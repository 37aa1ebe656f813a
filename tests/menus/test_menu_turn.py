"""``run_turn``: work first (native tool calls), decide last (one JSON pick)."""

from typing import Annotated, Any

import pytest

from shared.errors import DecisionError
from shared.menus import (
    DECISION_FINISH_INSTRUCTION,
    FromContext,
    ModelReply,
    Runtime,
    ToolCall,
    bind_runtime,
    render_options,
    run_turn,
)
from shared.menus.faux import ScriptedRuntime, pick_text, tool_calls

LOOKED_UP: list[str] = []


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    LOOKED_UP.append(order_id)
    return {"order_id": order_id, "status": "shipped"}


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {order_id} {amount}"


CHOICES: dict[str, Any] = {
    "refund": issue_refund,
    "escalate": "ESCALATED",
    "close": {"status": "closed"},
}


@pytest.fixture(autouse=True)
def _clear() -> None:
    LOOKED_UP.clear()


def test_tools_then_pick() -> None:
    runtime = ScriptedRuntime(
        [
            tool_calls(("lookup_order", {"order_id": "A1"})),
            pick_text("refund", {"order_id": "A1", "amount": 5}, prose="It shipped, refunding."),
        ]
    )
    got = run_turn("Handle ticket T1.", tools=[lookup_order], choices=CHOICES, runtime=runtime)
    assert got == "refunded A1 5.0"
    assert LOOKED_UP == ["A1"]
    first, second = runtime.requests
    assert first.tools is not None and [t.name for t in first.tools] == ["lookup_order"]
    assert first.tools[0].parameters == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[1]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert second.messages[2] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": '{"order_id": "A1", "status": "shipped"}',
    }


def test_the_finish_instruction_is_appended_only_on_this_path() -> None:
    runtime = ScriptedRuntime([pick_text("escalate")])
    assert run_turn("Handle it.", choices=CHOICES, runtime=runtime) == "ESCALATED"
    content = runtime.requests[0].messages[0]["content"] or ""
    assert content == f"Handle it.\n\n{render_options(CHOICES)}\n{DECISION_FINISH_INSTRUCTION}"


def test_a_dict_value_is_returned_as_is() -> None:
    runtime = ScriptedRuntime([pick_text("close")])
    assert run_turn("Handle it.", choices=CHOICES, runtime=runtime) == {"status": "closed"}


def test_last_pick_in_a_reasoning_reply_wins() -> None:
    text = (
        'Maybe {"call": "escalate"}? No: the order shipped.\n'
        '```json\n{"call": "close", "args": {}}\n```'
    )
    runtime = ScriptedRuntime([text])
    assert run_turn("Handle it.", choices=CHOICES, runtime=runtime) == {"status": "closed"}


def test_several_tool_calls_in_one_turn_run_in_order() -> None:
    runtime = ScriptedRuntime(
        [
            tool_calls(("lookup_order", {"order_id": "A"}), ("lookup_order", {"order_id": "B"})),
            pick_text("escalate"),
        ]
    )
    run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime)
    assert LOOKED_UP == ["A", "B"]
    assert [m.get("tool_call_id") for m in runtime.requests[1].messages[2:]] == ["call_0", "call_1"]


def test_a_wrong_tool_call_is_answered_with_an_error_and_nothing_runs() -> None:
    runtime = ScriptedRuntime(
        [
            tool_calls(("nope", {}), ("lookup_order", {"order_id": 5}), ("lookup_order", {})),
            ModelReply(
                text=None,
                finish_reason="tool_calls",
                tool_calls=(ToolCall("c9", "lookup_order", "{not json"),),
            ),
            pick_text("escalate"),
        ]
    )
    assert run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime) == "ESCALATED"
    assert LOOKED_UP == []
    results = [m.get("content") or "" for m in runtime.requests[1].messages if m["role"] == "tool"]
    assert results[0].startswith("error: unknown_call: no tool 'nope'")
    assert results[1].startswith("error: type_mismatch: order_id")
    assert results[2].startswith("error: missing_required: order_id")
    assert (
        runtime.requests[2].messages[-1]["content"] == "error: bad_args: the arguments are not JSON"
    )


def test_a_tool_exception_propagates_as_itself() -> None:
    class Down(Exception):
        pass

    def flaky() -> None:
        raise Down()

    runtime = ScriptedRuntime([tool_calls(("flaky", {}))])
    with pytest.raises(Down):
        run_turn("Go.", tools=[flaky], choices=CHOICES, runtime=runtime)


def test_tools_get_injected_parameters() -> None:
    seen: dict[str, Any] = {}

    def whoami(*, runtime: Runtime, user: Annotated[str, FromContext]) -> str:
        seen.update(runtime=runtime, user=user)
        return user

    runtime = ScriptedRuntime([tool_calls(("whoami", {"user": "mallory"})), pick_text("escalate")])
    run_turn("Go.", tools=[whoami], choices=CHOICES, runtime=runtime, context={"user": "bob"})
    assert seen == {"runtime": runtime, "user": "bob"}
    assert runtime.requests[0].tools is not None
    assert runtime.requests[0].tools[0].parameters["properties"] == {}


def test_step_budget_bounds_the_tool_turns() -> None:
    always_tools = [tool_calls(("lookup_order", {"order_id": str(i)})) for i in range(3)]
    runtime = ScriptedRuntime([*always_tools, pick_text("escalate")])
    assert (
        run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime, max_steps=3)
        == "ESCALATED"
    )
    assert LOOKED_UP == ["0", "1"]  # the third turn's calls are not run: the budget is spent
    retry = runtime.requests[3]
    assert retry.tools is None and "work budget (3 model turns) is spent" in retry.prompt


def test_a_pick_beside_tool_calls_on_the_last_step_is_taken() -> None:
    runtime = ScriptedRuntime(
        [tool_calls(("lookup_order", {"order_id": "A"}), text=pick_text("escalate"))]
    )
    assert (
        run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime, max_steps=1)
        == "ESCALATED"
    )
    assert LOOKED_UP == []


def test_the_retry_is_fixed_at_one() -> None:
    runtime = ScriptedRuntime(["no pick", "still no pick"])
    with pytest.raises(DecisionError) as info:
        run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime)
    assert info.value.attempts == 2 and runtime.calls == 2
    assert [e["step"] for e in info.value.errors] == ["turn.0", "pick.1"]


def test_the_retry_shows_the_menu_and_offers_no_tools() -> None:
    runtime = ScriptedRuntime(["no pick", pick_text("escalate")])
    run_turn("Go.", tools=[lookup_order], choices=CHOICES, runtime=runtime)
    retry = runtime.requests[1]
    assert retry.tools is None and render_options(CHOICES) in retry.prompt


def test_without_choices_the_reply_text_is_returned() -> None:
    runtime = ScriptedRuntime([tool_calls(("lookup_order", {"order_id": "A"})), "All done."])
    assert run_turn("Go.", tools=[lookup_order], runtime=runtime) == "All done."
    assert DECISION_FINISH_INSTRUCTION not in runtime.requests[0].prompt


def test_run_turn_takes_the_bound_runtime_and_needs_one() -> None:
    with pytest.raises(RuntimeError):
        run_turn("Go.", choices=CHOICES)
    runtime = ScriptedRuntime([pick_text("escalate")])
    with bind_runtime(runtime):
        assert run_turn("Go.", choices=CHOICES) == "ESCALATED"


@pytest.mark.parametrize("bad", [0, -1, 2.0])
def test_max_steps_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        run_turn("Go.", choices=CHOICES, runtime=ScriptedRuntime([]), max_steps=bad)


def test_tools_must_be_functions() -> None:
    with pytest.raises(TypeError, match="not a function"):
        run_turn("Go.", tools=["done"], choices=CHOICES, runtime=ScriptedRuntime([]))
