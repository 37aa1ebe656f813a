"""Reading a chat-completions response: the reply, its id, its cost, and error details.

The OpenAI shape, which OpenRouter, vLLM and most local servers speak::

    {"id": "...", "model": "...",
     "choices": [{"finish_reason": "stop" | "length" | "tool_calls" | "content_filter",
                  "message": {"role": "assistant", "content": "..." | null,
                              "refusal": "..." | null,
                              "tool_calls": [{"id", "type": "function",
                                              "function": {"name", "arguments"}}]}}],
     "usage": {"prompt_tokens", "completion_tokens", "cost"?}}

``content`` may also be a list of parts (``[{"type": "text", "text": ...}]``); their texts are
joined. A tool call's ``arguments`` is JSON text; an object sent instead is re-encoded, so the
engine always sees text. A reply asking for more tool calls than any job may run
(``MAX_TOOL_CALLS_PER_JOB``) is invalid: every call must be answered on the next turn, and
an attack's 57,000 calls, each answered and carried on every later turn, took one job to
requests of 68 MB. ``usage.cost`` (OpenRouter) is the reported cost in USD; without
it the cost is unknown (``None``, never 0).
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx

from shared.jobs import MAX_TOOL_CALLS_PER_JOB
from shared.limits import MAX_ID_CHARS
from shared.menus import ModelReply, ToolCall
from worker.providers.outbound import ErrorDetails

__all__ = [
    "ResponseInvalid",
    "answered_model",
    "decode_reply",
    "error_details",
    "reported_cost",
    "response_id",
]


class ResponseInvalid(ValueError):
    """A 2xx body that is not a chat completion; the message says what is missing."""


def decode_reply(body: Any) -> ModelReply:
    if not isinstance(body, dict):
        raise ResponseInvalid("the body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ResponseInvalid("the body has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ResponseInvalid("choices[0] has no message")
    finish = choice.get("finish_reason")
    refusal = message.get("refusal")
    return ModelReply(
        text=_content(message.get("content")),
        finish_reason=finish if isinstance(finish, str) else None,
        tool_calls=_tool_calls(message.get("tool_calls")),
        refusal=refusal if isinstance(refusal, str) and refusal else None,
    )


def _content(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(texts) if texts else None
    raise ResponseInvalid("choices[0].message.content is neither text nor parts")


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ResponseInvalid("choices[0].message.tool_calls is not a list")
    if len(raw) > MAX_TOOL_CALLS_PER_JOB:
        raise ResponseInvalid(
            f"the reply asks for {len(raw)} tool calls; a job runs at most "
            f"{MAX_TOOL_CALLS_PER_JOB} (work.max_tool_calls)"
        )
    calls = []
    for i, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ResponseInvalid(f"tool_calls[{i}] has no function name")
        assert isinstance(function, dict) and isinstance(item, dict)
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = item.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else f"call_{i}"
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def reported_cost(body: Any) -> float | None:
    usage = body.get("usage") if isinstance(body, dict) else None
    cost = usage.get("cost") if isinstance(usage, dict) else None
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        return None
    return float(cost) if math.isfinite(cost) and cost >= 0 else None


def response_id(body: Any) -> str | None:
    value = body.get("id") if isinstance(body, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS else None


def answered_model(body: Any, asked: str) -> str:
    value = body.get("model") if isinstance(body, dict) else None
    # An id's bound: a 3 MB name went in every receipt (and a label naming it is refused).
    return value if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS else asked


def error_details(status: int, headers: httpx.Headers, body: bytes) -> ErrorDetails:
    """The request id header and the error's type or code (the transport sanitises both)."""
    ref_id = headers.get("x-request-id")
    kind: str | None = None
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        for key in ("type", "code"):
            value = error.get(key)
            if isinstance(value, str) and value:
                kind = value
                break
    return ErrorDetails(ref_id=ref_id, kind=kind)
