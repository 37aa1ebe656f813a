"""``make``: runtime binding, the prompt, resolution, retries, DecisionError."""

import asyncio
import json
from typing import Any

import pytest

from shared.errors import DecisionError, DecisionWorkerError
from shared.menus import (
    DECISION_FINISH_INSTRUCTION,
    RETRY_PROMPT_CHARS,
    RETRY_REPLY_CHARS,
    ModelReply,
    Runtime,
    bind_runtime,
    current_runtime,
    make,
    render_options,
)
from shared.menus.faux import ScriptedRuntime, pick_text, refusal, truncated


def analyze_sentiment(text: str) -> str:
    """Analyze the sentiment of the message."""
    return f"sentiment of {text}"


class Boom(Exception):
    pass


def explode() -> None:
    """Always fails."""
    raise Boom("handler failed")


OPTIONS: dict[str, Any] = {
    "analyze": analyze_sentiment,
    "done": "CONVERSATION_OVER",
    "explode": explode,
    "emit_plan": ("Produce a plan.", {"steps": [{"action": str, "target": str}]}),
}


# -- resolution --------------------------------------------------------------------------------


def test_a_function_pick_runs_the_function() -> None:
    runtime = ScriptedRuntime([pick_text("analyze", {"text": "hello"})])
    assert make("Pick one.", OPTIONS, runtime=runtime) == "sentiment of hello"


def test_a_value_pick_returns_the_value() -> None:
    signal = object()
    runtime = ScriptedRuntime([pick_text("abort")])
    assert make("Pick.", {"abort": (signal, "when stuck")}, runtime=runtime) is signal


def test_a_schema_pick_returns_decision_and_fields() -> None:
    runtime = ScriptedRuntime(
        [pick_text("emit_plan", {"steps": [{"action": "a", "target": "t", "x": 1}]})]
    )
    assert make("Plan.", OPTIONS, runtime=runtime) == {
        "decision": "emit_plan",
        "steps": [{"action": "a", "target": "t"}],
    }


def test_the_handler_exception_propagates_as_itself_without_a_retry() -> None:
    runtime = ScriptedRuntime([pick_text("explode")])
    with pytest.raises(Boom):
        make("Pick.", OPTIONS, runtime=runtime)
    assert runtime.calls == 1


def test_none_is_a_value() -> None:
    runtime = ScriptedRuntime([pick_text("nothing")])
    assert make("Pick.", {"nothing": None, "x": 1}, runtime=runtime) is None


# -- the prompt --------------------------------------------------------------------------------


def test_make_sends_prompt_and_menu_without_the_finish_instruction() -> None:
    runtime = ScriptedRuntime([pick_text("done")])
    make("Pick one way to handle this message.", OPTIONS, runtime=runtime)
    (request,) = runtime.requests
    assert request.messages == [
        {
            "role": "user",
            "content": "Pick one way to handle this message.\n\n" + render_options(OPTIONS),
        }
    ]
    assert DECISION_FINISH_INSTRUCTION not in request.prompt
    assert request.tools is None


def test_prompt_must_be_a_string() -> None:
    with pytest.raises(TypeError):
        make(["not", "a", "prompt"], OPTIONS, runtime=ScriptedRuntime([]))  # type: ignore[arg-type]


# -- runtime binding ---------------------------------------------------------------------------


def test_no_runtime_is_a_runtime_error() -> None:
    assert current_runtime() is None
    with pytest.raises(RuntimeError, match="no runtime"):
        make("Pick.", OPTIONS)


def test_no_runtime_is_reported_before_bad_options() -> None:
    with pytest.raises(RuntimeError):
        make("Pick.", {})


def test_bound_runtime_is_used() -> None:
    runtime = ScriptedRuntime([pick_text("done")])
    with bind_runtime(runtime) as bound:
        assert bound is runtime and current_runtime() is runtime
        assert make("Pick.", OPTIONS) == "CONVERSATION_OVER"
    assert current_runtime() is None and runtime.calls == 1


def test_explicit_runtime_wins_over_the_binding() -> None:
    bound, explicit = ScriptedRuntime([]), ScriptedRuntime([pick_text("done")])
    with bind_runtime(bound):
        make("Pick.", OPTIONS, runtime=explicit)
    assert (bound.calls, explicit.calls) == (0, 1)


def test_nested_bindings_restore_the_outer_one() -> None:
    outer, inner = ScriptedRuntime([]), ScriptedRuntime([])
    binding = bind_runtime(outer)
    with binding:
        with bind_runtime(inner):
            assert current_runtime() is inner
        assert current_runtime() is outer
        with binding:  # the same binding object, re-entered
            assert current_runtime() is outer
        assert current_runtime() is outer
    assert current_runtime() is None


def test_bind_runtime_as_a_decorator() -> None:
    runtime = ScriptedRuntime([pick_text("done")])

    class Agent:
        @bind_runtime(runtime)
        def route(self, msg: str) -> Any:
            """Route a message."""
            return make(f"Route {msg}.", OPTIONS)

    assert Agent().route("hi") == "CONVERSATION_OVER"
    assert Agent.route.__doc__ == "Route a message."
    assert current_runtime() is None


def test_bind_runtime_decorates_coroutines() -> None:
    runtime = ScriptedRuntime([])

    @bind_runtime(runtime)
    async def inside() -> Runtime | None:
        await asyncio.sleep(0)
        return current_runtime()

    assert asyncio.run(inside()) is runtime
    assert current_runtime() is None


def test_the_bound_runtime_is_restored_after_an_exception() -> None:
    with pytest.raises(Boom), bind_runtime(ScriptedRuntime([])):
        raise Boom()
    assert current_runtime() is None


def test_binding_none_is_refused() -> None:
    with pytest.raises(TypeError):
        bind_runtime(None)  # type: ignore[arg-type]


# -- retries -----------------------------------------------------------------------------------


def test_one_retry_by_default_then_success() -> None:
    runtime = ScriptedRuntime(["I would analyze it.", pick_text("analyze", {"text": "x"})])
    assert make("Pick.", OPTIONS, runtime=runtime) == "sentiment of x"
    assert runtime.calls == 2


def test_retry_prompt_holds_the_reply_the_problem_and_the_menu() -> None:
    runtime = ScriptedRuntime(['{"call": "fly", "args": {}}', pick_text("done")])
    make("Route this ticket.", OPTIONS, runtime=runtime)
    (message,) = runtime.requests[1].messages
    content = message["content"] or ""
    assert message["role"] == "user"
    assert "Route this ticket." in content
    assert '{"call": "fly", "args": {}}' in content
    assert "unknown_call" in content and "'fly' is not an option" in content
    assert "analyze, done, explode, emit_plan" in content
    assert render_options(OPTIONS) in content
    assert DECISION_FINISH_INSTRUCTION not in content
    assert runtime.requests[1].tools is None


def test_retry_prompt_is_bounded_and_does_not_grow_with_attempts() -> None:
    long_reply = "x" * 50_000 + " no pick here"
    runtime = ScriptedRuntime([long_reply] * 6)
    long_prompt = "p" * 50_000
    with pytest.raises(DecisionError):
        make(long_prompt, OPTIONS, runtime=runtime, max_retries=5)
    sizes = [len(r.prompt) for r in runtime.requests[1:]]
    assert len(set(sizes)) == 1
    menu = len(render_options(OPTIONS))
    assert sizes[0] < RETRY_REPLY_CHARS + RETRY_PROMPT_CHARS + menu + 2_000
    content = runtime.requests[1].prompt
    assert (
        "characters cut" in content and content.count("x" * 100) >= 1 and "no pick here" in content
    )


def test_max_retries_zero_disables_retries() -> None:
    runtime = ScriptedRuntime(["nothing"])
    with pytest.raises(DecisionError) as info:
        make("Pick.", OPTIONS, runtime=runtime, max_retries=0)
    assert info.value.attempts == 1 and runtime.calls == 1


def test_max_retries_many() -> None:
    runtime = ScriptedRuntime(["a", "b", "c", pick_text("done")])
    assert make("Pick.", OPTIONS, runtime=runtime, max_retries=3) == "CONVERSATION_OVER"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_max_retries_must_be_a_non_negative_int(bad: Any) -> None:
    runtime = ScriptedRuntime([])
    with pytest.raises((TypeError, ValueError)):
        make("Pick.", OPTIONS, runtime=runtime, max_retries=bad)
    assert runtime.calls == 0


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("no json at all", "no_action"),
        ('{"call": "fly"}', "unknown_call"),
        ('{"call": ["analyze"]}', "unknown_call"),
        ('{"call": "analyze", "args": [1]}', "bad_args"),
        ('{"call": "analyze", "args": {}}', "missing_required"),
        ('{"call": "analyze", "args": {"text": 5}}', "type_mismatch"),
        (refusal("no."), "refusal"),
        (truncated('{"call": "ana'), "truncated"),
        (ModelReply(text=None), "no_action"),
    ],
)
def test_every_parse_error_kind_is_retried(reply: Any, kind: str) -> None:
    runtime = ScriptedRuntime([reply, pick_text("done")])
    assert make("Pick.", OPTIONS, runtime=runtime) == "CONVERSATION_OVER"
    assert f"{kind}:" in runtime.requests[1].prompt


def test_enum_violation_is_retried() -> None:
    options = {"o": ("d", {"mode": {"type": str, "options": ["a", "b"]}})}
    runtime = ScriptedRuntime(
        ['{"call": "o", "args": {"mode": "c"}}', '{"call": "o", "args": {"mode": "a"}}']
    )
    assert make("Pick.", options, runtime=runtime) == {"decision": "o", "mode": "a"}
    assert "enum_violation: mode:" in runtime.requests[1].prompt


# -- DecisionError ------------------------------------------------------------------------------


def test_exhausted_retries_raise_decision_error_with_fields() -> None:
    runtime = ScriptedRuntime(
        ["I think analyze " + "y" * 1000, '{"call": "analyze", "args": {"text": 1}}']
    )
    with pytest.raises(DecisionError) as info:
        make("Pick.", OPTIONS, runtime=runtime)
    error = info.value
    assert error.kind == "type_mismatch"
    assert "text: expected str, got integer 1" in error.message
    assert error.attempts == 2
    assert error.reply_head == '{"call": "analyze", "args": {"text": 1}}'
    assert [e["kind"] for e in error.errors] == ["no_action", "type_mismatch"]
    assert [e["step"] for e in error.errors] == ["pick.0", "pick.1"]
    assert (
        error.errors[0]["reply_head"].startswith("I think analyze")
        and len(error.errors[0]["reply_head"]) <= 500
    )
    assert error.errors[1]["path"] == "text"
    assert all(isinstance(v, str) for e in error.errors for v in e.values())
    json.dumps(error.errors)


def test_decision_error_is_a_value_error_and_a_worker_error() -> None:
    runtime = ScriptedRuntime(["x", "y"])
    with pytest.raises(ValueError):
        make("Pick.", OPTIONS, runtime=runtime)
    assert issubclass(DecisionError, DecisionWorkerError)

    def planner() -> str:
        try:
            return str(make("Pick.", OPTIONS, runtime=ScriptedRuntime(["x", "y"])))
        except ValueError:  # old code that predates DecisionError still catches it
            return "step over"

    assert planner() == "step over"


def test_a_handler_value_error_is_not_a_decision_error() -> None:
    def bad() -> None:
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine") as info:
        make("Pick.", {"bad": bad}, runtime=ScriptedRuntime([pick_text("bad")]))
    assert not isinstance(info.value, DecisionError)


def test_missing_context_is_raised_before_any_model_call() -> None:
    from tests.menus import handlers_future

    runtime = ScriptedRuntime([])
    with pytest.raises(TypeError, match="context"):
        make("Pick.", [handlers_future.with_injections], runtime=runtime, context={"user": "u"})
    assert runtime.calls == 0


def test_injection_end_to_end() -> None:
    from tests.menus import handlers_future

    runtime = ScriptedRuntime(
        [pick_text("with_injections", {"order_id": "A", "user": "mallory", "runtime": 1})]
    )
    got = make(
        "Pick.",
        [handlers_future.with_injections],
        runtime=runtime,
        context={"user": "bob", "org": "acme"},
    )
    assert got == {"order_id": "A", "runtime": runtime, "user": "bob", "tenant": "acme"}
