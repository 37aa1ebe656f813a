"""What the ledger keeps of each menu call (``outcome_json``), and reading it back.

A redelivered menu job replays these instead of calling again, so each form holds what the
session needs to take the same step, plus a ``head`` for ``decisions trace``:

- a model call: ``{"reply": {"text", "finish_reason", "refusal", "tool_calls": [...]}, "head"}``
- a tool execution: ``{"tool", "turn", "call_id", "args", "content", "head"}`` (``content`` is
  the tool message the model saw, so a replay feeds it the same bytes), or ``{"error", ...}``
- the handler: ``{"handler", "option", "args", "value", "head"}``, or ``{"error", ...}``

``args`` are the model's arguments only: injected values (context, runtime) are never stored.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_jsonable_python

from shared import scrub
from shared.menus import REPLY_HEAD_CHARS, ModelReply, ToolCall, reply_text

__all__ = [
    "HEAD_CHARS",
    "error_text",
    "head_of",
    "jsonable",
    "read_outcome",
    "reply_from_outcome",
    "reply_outcome",
    "tool_content",
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
    stored = read_outcome(outcome_json).get("reply")
    if not isinstance(stored, dict):
        raise ValueError("the stored outcome holds no reply")
    return ModelReply(
        text=stored.get("text"),
        finish_reason=stored.get("finish_reason"),
        refusal=stored.get("refusal"),
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c.get("arguments", "{}"))
            for c in stored.get("tool_calls") or []
        ),
    )


def read_outcome(outcome_json: str | None) -> dict[str, Any]:
    if not outcome_json:
        return {}
    value = json.loads(outcome_json)
    return value if isinstance(value, dict) else {}


def jsonable(value: Any) -> Any:
    """A handler's result as plain JSON (what a result message can carry and the ledger keep).

    Pydantic's encoder takes dataclasses, models, datetimes, sets and the like; anything else
    becomes its ``repr``.
    """
    return to_jsonable_python(value, fallback=repr)


def tool_content(result: Any) -> str:
    """The tool message content a result becomes (the engine's own rule, made storable)."""
    if isinstance(result, str):
        return result
    return json.dumps(jsonable(result), ensure_ascii=False, sort_keys=True)


def error_text(exc: BaseException) -> str:
    return scrub.error_text(exc, ERROR_CHARS)  # type and scrubbed message (shared.scrub)


def head_of(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:HEAD_CHARS]
