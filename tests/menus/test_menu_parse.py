"""From a reply to a validated pick: kinds, injection, **kwargs, refusals, truncation."""

import json
from typing import Annotated, Any

import pytest
from hypothesis import given, settings

from shared.menus import (
    PICK_ERROR_KINDS,
    FromContext,
    FunctionOption,
    ModelReply,
    PickError,
    Runtime,
    SchemaOption,
    ToolCall,
    ValueOption,
    bind_runtime,
    parse_args,
    parse_pick,
)
from shared.menus.faux import ScriptedRuntime
from tests.menus import handlers_future
from tests.menus.support import json_values


def analyze(msg: str, depth: int = 1) -> str:
    """Analyze."""
    return f"{msg}:{depth}"


OPTIONS: dict[str, Any] = {
    "analyze": analyze,
    "done": "OVER",
    "plan": ("A plan.", {"steps": [str]}),
}


def error_of(reply: Any, options: Any = OPTIONS, **kw: Any) -> PickError:
    with pytest.raises(PickError) as info:
        parse_args(reply, options, **kw)
    return info.value


def test_function_pick_returns_the_option_and_kwargs() -> None:
    chosen, kwargs = parse_args('{"call": "analyze", "args": {"msg": "hi"}}', OPTIONS)
    assert isinstance(chosen, FunctionOption) and chosen.func is analyze
    assert kwargs == {"msg": "hi"}


def test_value_pick_ignores_args() -> None:
    chosen, kwargs = parse_args('{"call": "done", "args": {"x": 1}}', OPTIONS)
    assert chosen == ValueOption("done", "OVER") and kwargs == {}


def test_schema_pick_returns_the_fields() -> None:
    chosen, kwargs = parse_args('{"call": "plan", "args": {"steps": ["a"], "x": 1}}', OPTIONS)
    assert isinstance(chosen, SchemaOption) and kwargs == {"steps": ["a"]}


def test_unknown_call_lists_the_valid_names() -> None:
    error = error_of('{"call": "fly", "args": {}}')
    assert error.kind == "unknown_call"
    assert "'fly'" in error.message and "analyze, done, plan" in error.message


def test_non_string_call_lists_the_valid_names_too() -> None:
    error = error_of('{"call": ["analyze"], "args": {}}')
    assert error.kind == "unknown_call"


def test_missing_required_parameter() -> None:
    error = error_of('{"call": "analyze", "args": {}}')
    assert (error.kind, error.path) == ("missing_required", "msg")


def test_optional_parameter_may_be_omitted_and_is_validated_when_sent() -> None:
    assert parse_args('{"call": "analyze", "args": {"msg": "m"}}', OPTIONS)[1] == {"msg": "m"}
    error = error_of('{"call": "analyze", "args": {"msg": "m", "depth": true}}')
    assert (error.kind, error.path) == ("type_mismatch", "depth")


def test_fields_outside_the_signature_are_dropped() -> None:
    assert parse_args('{"call": "analyze", "args": {"msg": "m", "zzz": 1}}', OPTIONS)[1] == {
        "msg": "m"
    }


def test_kwargs_function_receives_extra_fields() -> None:
    def f(a: int, **extra: Any) -> dict[str, Any]:
        return {"a": a, **extra}

    _, kwargs = parse_args('{"call": "f", "args": {"a": 1, "b": [2], "c": {"d": 3}}}', [f])
    assert kwargs == {"a": 1, "b": [2], "c": {"d": 3}}


def test_flat_form_pick() -> None:
    assert parse_args('{"call": "analyze", "msg": "flat"}', OPTIONS)[1] == {"msg": "flat"}


def test_enum_violation_and_paths_for_literal_parameters() -> None:
    error = error_of(
        '{"call": "plan", "args": {"steps": ["a"], "limit": 1, "mode": "warp"}}',
        [handlers_future.plan],
    )
    assert (error.kind, error.path) == ("enum_violation", "mode")


def test_string_annotated_handler_validates_nested_types() -> None:
    error = error_of(
        '{"call": "plan", "args": {"steps": ["a", 2], "limit": null}}', [handlers_future.plan]
    )
    assert (error.kind, error.path) == ("type_mismatch", "steps[1]")


# -- injection ---------------------------------------------------------------------------------


def test_injected_values_are_filled() -> None:
    runtime = ScriptedRuntime([])
    _, kwargs = parse_args(
        '{"call": "with_injections", "args": {"order_id": "A1"}}',
        [handlers_future.with_injections],
        context={"user": "bob", "org": "acme"},
        runtime=runtime,
    )
    assert kwargs == {"order_id": "A1", "runtime": runtime, "user": "bob", "tenant": "acme"}


def test_model_values_for_injected_parameters_are_ignored() -> None:
    runtime = ScriptedRuntime([])
    reply = json.dumps(
        {
            "call": "with_injections",
            "args": {"order_id": "A1", "runtime": "evil", "user": "mallory", "tenant": "x"},
        }
    )
    pick = parse_pick(
        reply,
        [handlers_future.with_injections],
        context={"user": "bob", "org": "acme"},
        runtime=runtime,
    )
    assert pick.kwargs == {"order_id": "A1", "runtime": runtime, "user": "bob", "tenant": "acme"}
    assert pick.args == {"order_id": "A1"}


def test_injected_parameters_never_reach_kwargs_extras() -> None:
    def f(
        a: int, *, runtime: Runtime, who: Annotated[str, FromContext] = "nobody", **extra: Any
    ) -> None: ...

    runtime = ScriptedRuntime([])
    pick = parse_pick(
        '{"call": "f", "args": {"a": 1, "runtime": 2, "who": "model", "b": 3}}',
        [f],
        runtime=runtime,
    )
    assert pick.kwargs == {"a": 1, "b": 3, "runtime": runtime}  # "who" keeps its default


def test_runtime_comes_from_the_binding_when_not_passed() -> None:
    runtime = ScriptedRuntime([])
    with bind_runtime(runtime):
        _, kwargs = parse_args(
            '{"call": "with_injections", "args": {"order_id": "A1"}}',
            [handlers_future.with_injections],
            context={"user": "u", "org": "o"},
        )
    assert kwargs["runtime"] is runtime


def test_missing_context_key_is_the_callers_type_error() -> None:
    with pytest.raises(TypeError, match=r"context\['org'\]"):
        parse_args(
            '{"call": "with_injections", "args": {"order_id": "A1"}}',
            [handlers_future.with_injections],
            context={"user": "u"},
            runtime=ScriptedRuntime([]),
        )


def test_missing_runtime_is_a_runtime_error() -> None:
    with pytest.raises(RuntimeError):
        parse_args(
            '{"call": "with_injections", "args": {"order_id": "A1"}}',
            [handlers_future.with_injections],
            context={"user": "u", "org": "o"},
        )


# -- replies -----------------------------------------------------------------------------------


def test_model_reply_text_is_parsed() -> None:
    assert parse_args(ModelReply(text='{"call": "done"}'), OPTIONS)[0].name == "done"


def test_refusal_is_told_apart_from_no_action() -> None:
    error = error_of(ModelReply(text=None, refusal="I won't."))
    assert error.kind == "refusal" and "I won't." in error.message
    assert error_of(ModelReply(text="sorry", finish_reason="content_filter")).kind == "refusal"


def test_refusal_wins_over_a_pick_in_the_text() -> None:
    assert error_of(ModelReply(text='{"call": "done"}', refusal="no")).kind == "refusal"


def test_truncated_reply_is_told_apart_from_no_action() -> None:
    assert (
        error_of(ModelReply(text='Thinking... {"call": "ana', finish_reason="length")).kind
        == "truncated"
    )
    # Even a complete pick in a cut-off reply: the model may have meant a later one.
    assert (
        error_of(ModelReply(text='{"call": "done"} but then', finish_reason="length")).kind
        == "truncated"
    )


def test_empty_and_tool_call_only_replies_are_no_action() -> None:
    assert error_of(ModelReply(text=None)).kind == "no_action"
    assert error_of(ModelReply(text="")).kind == "no_action"
    reply = ModelReply(text=None, finish_reason="tool_calls", tool_calls=(ToolCall("1", "done"),))
    error = error_of(reply)
    assert error.kind == "no_action" and "native tool calls" in error.message


@pytest.mark.parametrize("reply", [None, 3, ["x"], b"{}"])
def test_non_text_reply_is_a_parse_error(reply: Any) -> None:
    assert error_of(reply).kind == "no_action"


def test_a_pick_object_is_accepted_as_a_reviewer_answer() -> None:
    assert parse_args({"call": "analyze", "args": {"msg": "r"}}, OPTIONS)[1] == {"msg": "r"}
    assert error_of({"call": "analyze", "args": []}).kind == "bad_args"


def test_pick_to_json_is_the_wire_form() -> None:
    pick = parse_pick('{"call": "analyze", "args": {"msg": "m", "junk": 1}}', OPTIONS)
    assert pick.to_json() == {"call": "analyze", "args": {"msg": "m"}}


def test_malformed_options_are_not_parse_errors() -> None:
    with pytest.raises(TypeError):
        parse_args('{"call": "x"}', [42])


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_args_raise_only_the_parse_error(args: Any) -> None:
    options: dict[str, Any] = {
        **OPTIONS,
        "deep": (
            "d",
            {"a": [{"b": {"type": int, "options": [1, 2]}, "c": float}], "d": dict[str, bool]},
        ),
    }
    for call in ("analyze", "plan", "deep", "done"):
        try:
            parse_args({"call": call, "args": args}, options)
        except PickError as error:
            assert error.kind in PICK_ERROR_KINDS and error.problems


def test_a_non_string_call_also_lists_the_valid_names() -> None:
    error = error_of('{"call": {"name": "analyze"}, "args": {}}')
    assert error.kind == "unknown_call" and "valid options: analyze, done, plan" in error.message
