"""The sans-I/O session the worker drives: steps, their keys, and the building blocks."""

import asyncio
from typing import Any

import pytest

from shared.errors import DecisionError
from shared.menus import (
    Decided,
    DecisionSession,
    Finished,
    ModelReply,
    ModelStep,
    PickError,
    ToolStep,
    build_menu,
    build_menu_prompt,
    build_retry_messages,
    clip,
    parse_args,
    resolve_decision,
)
from shared.menus.faux import pick_text, tool_calls


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def handle(x: int) -> int:
    """Handle x."""
    return x * 2


CHOICES: dict[str, Any] = {"handle": handle, "done": "DONE"}


def test_make_session_steps_and_keys() -> None:
    session = DecisionSession.for_make("Pick.", CHOICES)
    first = session.start()
    assert isinstance(first, ModelStep) and first.step == "pick.0" and first.tools is None
    retry = session.on_reply("no pick")
    assert isinstance(retry, ModelStep) and retry.step == "pick.1"
    decided = session.on_reply(pick_text("handle", {"x": 2}))
    assert isinstance(decided, Decided) and decided.attempts == 2
    assert decided.pick.to_json() == {"call": "handle", "args": {"x": 2}}
    assert decided.resolve() == 4


def test_turn_session_steps_and_keys() -> None:
    session = DecisionSession.for_turn("Go.", CHOICES, tools=[lookup], max_steps=4)
    assert session.start().step == "turn.0"
    tool = session.on_reply(tool_calls(("lookup", {"key": "a"}), ("lookup", {"key": "b"})))
    assert isinstance(tool, ToolStep) and tool.step == "tool.0" and tool.kwargs == {"key": "a"}
    tool = session.on_tool_result(tool.run())
    assert isinstance(tool, ToolStep) and tool.step == "tool.1"
    turn = session.on_tool_result(tool.run())
    assert isinstance(turn, ModelStep) and turn.step == "turn.1" and turn.tools is not None
    assert turn.messages[-2:] == [
        {"role": "tool", "tool_call_id": "call_0", "content": "value of a"},
        {"role": "tool", "tool_call_id": "call_1", "content": "value of b"},
    ]
    retry = session.on_reply("thinking, no pick")
    assert isinstance(retry, ModelStep) and retry.step == "pick.1" and retry.tools is None
    with pytest.raises(DecisionError) as info:
        session.on_reply("still none")
    assert [e["step"] for e in info.value.errors] == ["turn.1", "pick.1"]
    # What a menu_unparseable escalation carries: the rendered menu and the last reply.
    assert session.last_reply == ModelReply(text="still none")
    assert session.menu is not None and session.menu.text.startswith("Options")


def test_same_replies_same_steps() -> None:
    def run() -> list[tuple[str, Any]]:
        session = DecisionSession.for_turn("Go.", CHOICES, tools=[lookup])
        seen: list[tuple[str, Any]] = []
        action: Any = session.start()
        replies: list[ModelReply | str] = [
            tool_calls(("lookup", {"key": "a"})),
            "none",
            pick_text("done"),
        ]
        while not isinstance(action, Decided):
            seen.append((action.step, getattr(action, "messages", None)))
            assert not isinstance(action, Finished)
            action = (
                session.on_reply(replies.pop(0))
                if isinstance(action, ModelStep)
                else session.on_tool_result("r")
            )
        return seen

    assert run() == run()


def test_the_worker_can_drive_it_asynchronously() -> None:
    ledger: list[str] = []

    async def ledgered_exec(step: ModelStep) -> ModelReply:
        ledger.append(step.step)
        await asyncio.sleep(0)
        return (
            ModelReply(text=pick_text("handle", {"x": 21}))
            if step.step == "turn.1"
            else tool_calls(("lookup", {"key": "k"}))
        )

    async def ledgered_tool(step: ToolStep) -> Any:
        ledger.append(step.step)
        return step.run()

    async def main() -> Any:
        session = DecisionSession.for_turn("Go.", CHOICES, tools=[lookup])
        action: Any = session.start()
        while True:
            if isinstance(action, ModelStep):
                action = session.on_reply(await ledgered_exec(action))
            elif isinstance(action, ToolStep):
                action = session.on_tool_result(await ledgered_tool(action))
            else:
                ledger.append("handler")
                return action.resolve()

    assert asyncio.run(main()) == 42
    assert ledger == ["turn.0", "tool.0", "turn.1", "handler"]


def test_a_turn_without_choices_finishes_with_text() -> None:
    session = DecisionSession.for_turn("Go.", None)
    session.start()
    finished = session.on_reply("the answer")
    assert isinstance(finished, Finished) and finished.text == "the answer"


def test_calls_out_of_order_are_refused() -> None:
    session = DecisionSession.for_make("Pick.", CHOICES)
    with pytest.raises(RuntimeError):
        session.on_reply("x")
    session.start()
    with pytest.raises(RuntimeError):
        session.start()
    with pytest.raises(RuntimeError):
        session.on_tool_result("x")
    session.on_reply(pick_text("done"))
    with pytest.raises(RuntimeError):
        session.on_reply(pick_text("done"))


def test_building_blocks_compose_like_make() -> None:
    menu = build_menu(CHOICES)
    messages = build_menu_prompt("Pick.", menu)
    assert messages == [{"role": "user", "content": f"Pick.\n\n{menu.text}"}]
    bad = "no pick"
    try:
        parse_args(bad, menu)
    except PickError as error:
        retry = build_retry_messages(bad, error, menu, prompt="Pick.")
    assert len(retry) == 1 and menu.text in (retry[0]["content"] or "")
    chosen, kwargs = parse_args(pick_text("handle", {"x": 1}), menu)
    assert resolve_decision(chosen, kwargs, menu) == 2


def test_resolve_decision_accepts_names_and_functions() -> None:
    assert resolve_decision("done", {}, CHOICES) == "DONE"
    assert resolve_decision(handle, {"x": 3}, CHOICES) == 6
    assert resolve_decision(handle, {"x": 4}) == 8
    with pytest.raises(LookupError):
        resolve_decision("nope", {}, CHOICES)
    with pytest.raises(TypeError):
        resolve_decision("done", {})


def test_clip_keeps_head_and_tail_within_the_bound() -> None:
    text = "A" * 100 + "B" * 5000 + "Z" * 100
    cut = clip(text, 400)
    assert cut.startswith("A" * 100) and cut.endswith("Z" * 100) and len(cut) < 460
    assert clip("short", 400) == "short"
