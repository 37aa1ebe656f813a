"""A scripted runtime for tests: replies in order, every request recorded.

``ScriptedRuntime([...])`` answers each ``exec`` with the next scripted reply: a string
(plain text), a ``ModelReply`` (refusals, truncation, tool calls), or a callable
``(messages, tools) -> ModelReply | str`` for replies that depend on the request. It records
a deep copy of every request; running out of script raises ``AssertionError`` (a test that
makes more model calls than it scripted is wrong, and must not pass by accident).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shared.menus.runtime import Message, ModelReply, ToolCall, ToolSpec

__all__ = [
    "Recorded",
    "ScriptedRuntime",
    "pick_text",
    "refusal",
    "tool_calls",
    "truncated",
]

Scripted = str | ModelReply | Callable[[list[Message], list[ToolSpec] | None], "ModelReply | str"]


@dataclass(frozen=True)
class Recorded:
    messages: list[Message]
    tools: list[ToolSpec] | None

    @property
    def prompt(self) -> str:
        """All message contents joined: what the model was shown."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


class ScriptedRuntime:
    def __init__(self, replies: Iterable[Scripted]) -> None:
        self.replies: list[Scripted] = list(replies)
        self.requests: list[Recorded] = []

    def exec(self, messages: list[Message], *, tools: list[ToolSpec] | None = None) -> ModelReply:
        self.requests.append(
            Recorded(copy.deepcopy(messages), list(tools) if tools is not None else None)
        )
        if not self.replies:
            raise AssertionError(
                f"ScriptedRuntime: no reply scripted for request {len(self.requests)}"
            )
        scripted = self.replies.pop(0)
        if callable(scripted) and not isinstance(scripted, ModelReply | str):
            scripted = scripted(messages, tools)
        return ModelReply(text=scripted) if isinstance(scripted, str) else scripted

    @property
    def calls(self) -> int:
        return len(self.requests)


def pick_text(call: str, args: dict[str, Any] | None = None, *, prose: str = "") -> str:
    """A reply that closes with a pick in a fenced block."""
    body = json.dumps({"call": call, "args": args or {}})
    return f"{prose}\n```json\n{body}\n```" if prose else f"```json\n{body}\n```"


def refusal(text: str = "I can't help with that.") -> ModelReply:
    return ModelReply(text=None, finish_reason="stop", refusal=text)


def truncated(text: str) -> ModelReply:
    return ModelReply(text=text, finish_reason="length")


def tool_calls(*calls: tuple[str, dict[str, Any]], text: str | None = None) -> ModelReply:
    """A reply making native tool calls, ids ``call_0``, ``call_1`` ..."""
    made = tuple(ToolCall.of(f"call_{i}", name, args) for i, (name, args) in enumerate(calls))
    return ModelReply(text=text, finish_reason="tool_calls", tool_calls=made)
