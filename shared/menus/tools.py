"""Native tools for a work turn: their specs, their calls, and the messages around them.

Tools are function options (the same containers: a callable, ``(callable, "desc")``, a
dict ``{name: callable}``, a ``Menu`` of handlers), offered through the chat-completions
``tools`` field with a JSON Schema from the signature; injected parameters stay hidden and
are injected the same way as for a pick.

A tool call the model got wrong (an unknown tool, arguments that are not a JSON object or
do not validate) is answered with an error message in the tool result, so the model can
correct it within its step budget; nothing runs. A tool's own exception propagates as
itself: the engine does not turn a failing side effect into text for the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shared.menus.errors import PickError, Problem
from shared.menus.menu import as_menu
from shared.menus.option_types import FunctionOption
from shared.menus.parse import bind_function_args
from shared.menus.runtime import Message, ModelReply, Runtime, ToolCall, ToolSpec
from shared.menus.schema_json import type_json_schema

__all__ = [
    "assistant_message",
    "normalize_tools",
    "parse_tool_call",
    "tool_error_message",
    "tool_result_message",
    "tool_spec",
    "tool_specs",
]


def normalize_tools(tools: Any) -> tuple[FunctionOption, ...]:
    """The tools as function options; ``()`` for no tools."""
    if tools is None or (isinstance(tools, list | tuple | dict) and not tools):
        return ()
    options = as_menu(tools).options
    for option in options:
        if not isinstance(option, FunctionOption):
            raise TypeError(f"tool {option.name!r} is not a function")
    return tuple(o for o in options if isinstance(o, FunctionOption))


def tool_spec(option: FunctionOption) -> ToolSpec:
    params = option.llm_params
    parameters = {
        "type": "object",
        "properties": {p.name: type_json_schema(p.spec) for p in params},
        "required": [p.name for p in params if p.required],
        "additionalProperties": option.accepts_extra,
    }
    return ToolSpec(option.name, option.description or "", parameters)


def tool_specs(tools: tuple[FunctionOption, ...]) -> list[ToolSpec]:
    return [tool_spec(t) for t in tools]


def parse_tool_call(
    call: ToolCall,
    tools: tuple[FunctionOption, ...],
    *,
    context: Mapping[str, Any] | None = None,
    runtime: Runtime | None = None,
) -> tuple[FunctionOption, dict[str, Any]]:
    """The tool and the keyword arguments to run it with; ``PickError`` if the call is wrong."""
    tool = next((t for t in tools if t.name == call.name), None)
    if tool is None:
        valid = ", ".join(t.name for t in tools) or "none"
        raise PickError("unknown_call", f"no tool {call.name!r}; tools: {valid}", path="name")
    try:
        args = json.loads(call.arguments or "{}")
    except (ValueError, RecursionError):
        raise PickError("bad_args", "the arguments are not JSON", path="arguments") from None
    if not isinstance(args, dict):
        raise PickError("bad_args", "the arguments must be a JSON object", path="arguments")
    problems: list[Problem] = []
    _, kwargs = bind_function_args(tool, args, context, runtime, problems)
    if problems:
        raise PickError.from_problems(problems)
    return tool, kwargs


def assistant_message(reply: ModelReply) -> Message:
    """The model's tool-calling turn, as it goes back into the conversation."""
    message: Message = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [c.to_json() for c in reply.tool_calls]
    return message


def tool_result_message(call: ToolCall, result: Any) -> Message:
    content = (
        result
        if isinstance(result, str)
        else json.dumps(result, ensure_ascii=False, sort_keys=True, default=str)
    )
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def tool_error_message(call: ToolCall, error: PickError) -> Message:
    return {
        "role": "tool",
        "tool_call_id": call.id,
        "content": f"error: {error.kind}: {error.message}",
    }
