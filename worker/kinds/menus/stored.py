"""What the ledger keeps of each menu call (``outcome_json``), and reading it back.

A redelivered menu job replays these instead of calling again, so each form holds what the
session needs to take the same step, plus a ``head`` for ``decisions trace``:

- a model call: ``{"reply": {"text", "finish_reason", "refusal", "tool_calls": [...]}, "head"}``
- a tool execution: ``{"tool", "turn", "call_id", "args", "content", "head"}`` (``content`` is
  the tool message the model saw, so a replay feeds it the same bytes), or ``{"error", ...}``
- the handler: ``{"handler", "option", "args", "value", "head"}``, or ``{"error", ...}``

``args`` are the model's arguments only: injected values (context, runtime) are never stored.

Reading one back (``reply_from_outcome``, ``tool_result_from_outcome``, ``handler_outcome``,
``error_from_outcome``) raises ``ValueError``, ``TypeError`` or ``RecursionError`` on a
column not of its form (a row damaged by hand: not JSON, another shape, nested too deep),
never makes up a replacement (an empty result, a null value): the kinds read them through
``worker.delivery.records.stored_outcome``, which turns that into an outcome not known.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_jsonable_python

from shared import scrub
from shared.menus import REPLY_HEAD_CHARS, ModelReply, ToolCall, reply_text

__all__ = [
    "HEAD_CHARS",
    "error_from_outcome",
    "error_text",
    "handler_outcome",
    "head_of",
    "jsonable",
    "read_outcome",
    "reply_from_outcome",
    "reply_outcome",
    "tool_content",
    "tool_result_from_outcome",
    "writable",
]

#: The head of a reply or result kept for the trace.
HEAD_CHARS = 200
#: Longest error text kept of a failing handler.
ERROR_CHARS = REPLY_HEAD_CHARS


def reply_outcome(reply: ModelReply) -> str:
    body = {
        "reply": {
            "text": reply.text,
            "finish_reason": reply.finish_reason,
            "refusal": reply.refusal,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
            ],
        },
        "head": _reply_head(reply),
    }
    return json.dumps(body, ensure_ascii=False, sort_keys=True)


def _reply_head(reply: ModelReply) -> str:
    head = reply_text(reply)[:HEAD_CHARS]
    if reply.tool_calls:
        names = ", ".join(c.name for c in reply.tool_calls)
        head = f"{head} [tool calls: {names}]".strip()
    return head


def reply_from_outcome(outcome_json: str | None) -> ModelReply:
    """The model reply a call stored (``reply_outcome``). Each field is checked: the session
    fed a reply of another shape would crash on it, or act on what the model never said."""
    stored = read_outcome(outcome_json).get("reply")
    if not isinstance(stored, dict):
        raise ValueError("the stored outcome holds no reply")
    tool_calls = stored.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise TypeError("the stored reply's tool_calls is not a list")
    return ModelReply(
        text=_text_or_none(stored, "text"),
        finish_reason=_text_or_none(stored, "finish_reason"),
        refusal=_text_or_none(stored, "refusal"),
        tool_calls=tuple(_tool_call(c) for c in tool_calls),
    )


def _text_or_none(stored: dict[str, Any], name: str) -> str | None:
    value = stored.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"the stored reply's {name} is not text")
    return value


def _tool_call(stored: Any) -> ToolCall:
    if not isinstance(stored, dict):
        raise TypeError("a stored tool call is not an object")
    call_id, name, arguments = stored.get("id"), stored.get("name"), stored.get("arguments", "{}")
    if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        raise TypeError("a stored tool call's id, name or arguments is missing or not text")
    return ToolCall(call_id, name, arguments)


def tool_result_from_outcome(outcome_json: str | None) -> str:
    """The tool message a tool run stored (the bytes the model was given)."""
    content = read_outcome(outcome_json).get("content")
    if not isinstance(content, str):
        raise ValueError("the stored outcome holds no tool result")
    return content


def handler_outcome(outcome_json: str | None) -> dict[str, Any]:
    """A handler run's stored outcome, holding its ``value`` (which may be null: a handler
    may return None, so it is its absence that is damage)."""
    stored = read_outcome(outcome_json)
    if "value" not in stored:
        raise ValueError("the stored outcome holds no value")
    # Checked as the first delivery checked the handler's return value: one nested deeper
    # than a result message can carry could never be sent (``HandlerOutputInvalid``).
    scrub.json_output(stored["value"])
    return stored


def error_from_outcome(outcome_json: str | None) -> str:
    """The error a failed tool or handler run stored (``error_text``)."""
    error = read_outcome(outcome_json).get("error")
    if not isinstance(error, str):
        raise ValueError("the stored outcome holds no error")
    return error


def read_outcome(outcome_json: str | None) -> dict[str, Any]:
    """The stored outcome as a JSON object; ``{}`` when none was stored. ``ValueError`` when
    it is not JSON or not an object, ``RecursionError`` when nested past the parser."""
    if not outcome_json:
        return {}
    value = json.loads(outcome_json)
    if not isinstance(value, dict):
        raise ValueError("the stored outcome is not a JSON object")
    return value


def jsonable(value: Any) -> Any:
    """A handler's result as plain JSON (what a result message can carry and the ledger keep).

    Pydantic's encoder takes dataclasses, models, datetimes, sets and the like; anything else
    becomes its ``repr``. A string no UTF-8 can hold (a lone surrogate) has "?" in its
    place: neither the ledger nor a message could be written with it, and the job was left
    without a terminal message for good (found by an attack).
    """
    plain = to_jsonable_python(value, fallback=repr)
    text = json.dumps(plain, ensure_ascii=False)
    clean = writable(text)
    return plain if clean is text else json.loads(clean)


def writable(text: str) -> str:
    """``text`` with "?" for each lone surrogate (as it is when it holds none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def tool_content(result: Any) -> str:
    """The tool message content a result becomes (the engine's own rule, made storable)."""
    if isinstance(result, str):
        return writable(result)
    return json.dumps(jsonable(result), ensure_ascii=False, sort_keys=True)


def error_text(exc: BaseException) -> str:
    return scrub.error_text(exc, ERROR_CHARS)  # type and scrubbed message (shared.scrub)


def head_of(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:HEAD_CHARS]
