"""What the faux chat endpoint says: deterministic replies, and scripted ones made concrete.

Deterministic (nothing scripted): when tools are offered and the conversation holds no tool
result yet (and ``use_tools`` is on), one tool call, the tool chosen by a hash of the
messages, its arguments placeholders from the tool's JSON Schema; otherwise, when the
messages carry a menu (its ``Call: {...}`` lines), a pick of one option, chosen by a hash of
the messages, whose arguments are the option's own ``Call:`` example, so the pick is valid
by construction; otherwise a plain text reply. The same messages give the same reply.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.canonical import canonical_bytes

__all__ = [
    "FauxChatReply",
    "FauxToolCall",
    "ReplyMessage",
    "deterministic_reply",
    "menu_calls",
    "scripted_reply",
]

_CALL_LINE = re.compile(r"^\s*Call: (\{.*\})\s*$", re.MULTILINE)


class FauxToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1)
    #: An object (sent as JSON text) or the raw text itself (to script broken arguments).
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class FauxChatReply(BaseModel):
    """One scripted reply.

    ``content`` is sent as the text; ``pick`` (an option name) closes it with a pick of that
    option, its arguments the menu's ``Call:`` example unless ``args`` replaces them;
    ``refusal`` fills ``message.refusal``; ``finish_reason`` defaults to ``tool_calls`` when
    there are ``tool_calls``, else ``stop`` (``length`` scripts a truncated reply).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str | None = None
    pick: str | None = None
    args: dict[str, Any] | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    tool_calls: list[FauxToolCall] = Field(default_factory=list)


#: ``(content, refusal, tool_calls, finish_reason)`` of the assistant message to send.
ReplyMessage = tuple[str | None, str | None, list[dict[str, Any]], str]


def _hash(messages: Sequence[Any], salt: str) -> int:
    digest = hashlib.sha256(salt.encode() + b"\x00" + canonical_bytes(list(messages)))
    return int.from_bytes(digest.digest()[:8], "big")


def menu_calls(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The ``Call:`` examples of the last message that shows a menu, in menu order."""
    for message in reversed(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, str):
            continue
        calls = []
        for match in _CALL_LINE.finditer(content):
            try:
                call = json.loads(match.group(1))
            except ValueError:
                continue
            if isinstance(call, dict) and isinstance(call.get("call"), str):
                calls.append(call)
        if calls:
            return calls
    return []


def _pick_text(call: Mapping[str, Any], prose: str | None) -> str:
    body = json.dumps({"call": call["call"], "args": call.get("args", {})}, ensure_ascii=False)
    head = prose if prose is not None else f"I pick {call['call']}."
    return f"{head}\n```json\n{body}\n```"


def _placeholder(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind is None:
        return "<any>"
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        required = schema.get("required") or []
        return {k: _placeholder(v) for k, v in schema["properties"].items() if k in required}
    return {
        "string": "<str>",
        "integer": 0,
        "number": 0.0,
        "boolean": False,
        "array": [],
        "object": {},
    }.get(kind if isinstance(kind, str) else "")


def _tool_names(tools: Sequence[Any]) -> list[tuple[str, Any]]:
    out = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            out.append((function["name"], function.get("parameters")))
    return out


def deterministic_reply(
    messages: Sequence[Any], tools: Sequence[Any] | None, *, use_tools: bool
) -> ReplyMessage:
    offered = _tool_names(tools or [])
    worked = any(isinstance(m, Mapping) and m.get("role") == "tool" for m in messages)
    if offered and use_tools and not worked:
        name, parameters = offered[_hash(messages, "tool") % len(offered)]
        args = _placeholder(parameters) or {}
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        return None, None, [call], "tool_calls"
    calls = menu_calls(messages)
    if calls:
        return _pick_text(calls[_hash(messages, "pick") % len(calls)], None), None, [], "stop"
    digest = hashlib.sha256(canonical_bytes(list(messages))).hexdigest()[:12]
    return f"faux reply {digest}", None, [], "stop"


def scripted_reply(reply: FauxChatReply, messages: Sequence[Any]) -> ReplyMessage:
    content = reply.content
    if reply.pick is not None:
        call = next((c for c in menu_calls(messages) if c["call"] == reply.pick), None)
        call = dict(call) if call is not None else {"call": reply.pick, "args": {}}
        if reply.args is not None:
            call["args"] = reply.args
        content = _pick_text(call, content)
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": t.name,
                "arguments": t.arguments
                if isinstance(t.arguments, str)
                else json.dumps(t.arguments, ensure_ascii=False),
            },
        }
        for i, t in enumerate(reply.tool_calls)
    ]
    finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
    return content, reply.refusal, tool_calls, finish
