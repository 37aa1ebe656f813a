"""The faux chat-completions endpoint: ``POST /v1/chat/completions`` (OpenAI flavour, no cost)
and ``POST /api/v1/chat/completions`` (OpenRouter flavour, ``gen-`` ids and ``usage.cost``).

``FauxProvider`` admits and counts these requests like the decision endpoints (by body
digest and ``X-Decisions-Call``), and its ``FauxBehaviour`` applies to them the same way
(latency, drops and resets, 429s, status codes, garbage, ``fail_first``, per-call
overrides; ``refuse`` answers with ``message.refusal``). ``FauxChat`` then answers: a
scripted reply when one is due (``FauxChatBehaviour``: ``by_call`` for one call key, else the
next of ``script``), otherwise the deterministic reply of ``chat_replies``.

Scripting: in process, ``provider.chat.set_behaviour(FauxChatBehaviour(...))``; on a server,
``PUT``/``PATCH``/``GET /_faux/chat`` with the same fields as JSON.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.tokens import estimate_tokens

from . import wire
from .chat_replies import (
    FauxChatReply,
    FauxToolCall,
    ReplyMessage,
    deterministic_reply,
    scripted_reply,
)
from .envelopes import error_body
from .outcome import FauxResponse, json_response

__all__ = [
    "CHAT_PATHS",
    "PATH_CHAT",
    "PATH_OPENROUTER_CHAT",
    "FauxChat",
    "FauxChatBehaviour",
    "FauxChatReply",
    "FauxToolCall",
]

PATH_CHAT: Final = "/v1/chat/completions"
PATH_OPENROUTER_CHAT: Final = "/api/v1/chat/completions"
CHAT_PATHS: Final = frozenset({PATH_CHAT, PATH_OPENROUTER_CHAT})
#: Made-up prices (USD per million tokens) behind the OpenRouter flavour's ``usage.cost``.
PRICE_IN_PER_MTOK: Final = 0.15
PRICE_OUT_PER_MTOK: Final = 0.60
_GARBAGE: Final = b'{"choices": [{"message": <faux garbage'
_DEEP_JSON: Final = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
_ROLES: Final = frozenset({"system", "user", "assistant", "tool", "developer"})
#: The fields that bound a reply's tokens (OpenAI's newer name, and the common one).
_TOKEN_BOUNDS: Final = ("max_completion_tokens", "max_tokens")


class FauxChatBehaviour(BaseModel):
    """Scripted chat replies. ``script`` answers the next requests in order; ``by_call``
    answers every request of one call key; ``use_tools`` lets deterministic replies call a
    tool before picking."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    script: list[FauxChatReply] = Field(default_factory=list)
    by_call: dict[str, FauxChatReply] = Field(default_factory=dict)
    use_tools: bool = True


class _Invalid(Exception):
    def __init__(self, message: str, loc: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc


def _check(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise _Invalid("the body must be a JSON object", ())
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _Invalid("model is required", ("model",))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Invalid("messages must be a non-empty array", ("messages",))
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            raise _Invalid("each message needs a valid role", ("messages", i, "role"))
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _Invalid("content must be a string, parts or null", ("messages", i, "content"))
    for name in _TOKEN_BOUNDS:
        bound = body.get(name)
        if bound is not None and (type(bound) is not int or bound < 1):
            raise _Invalid(f"{name} must be a positive integer", (name,))
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _Invalid("tools must be an array", ("tools",))
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                raise _Invalid("each tool needs a function with a name", ("tools", i))
    return body


def _authorised(headers: Mapping[str, str]) -> bool:
    scheme, _, key = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(key.strip())


class FauxChat:
    """The chat side of the faux: its scripted behaviour and the responses it builds."""

    def __init__(self, behaviour: FauxChatBehaviour | None = None) -> None:
        self._lock = threading.Lock()
        self._behaviour = behaviour or FauxChatBehaviour()
        self._script: list[FauxChatReply] = list(self._behaviour.script)

    @property
    def behaviour(self) -> FauxChatBehaviour:
        with self._lock:
            return self._behaviour.model_copy(update={"script": list(self._script)})

    def set_behaviour(self, behaviour: FauxChatBehaviour) -> None:
        with self._lock:
            self._behaviour = behaviour
            self._script = list(behaviour.script)

    def update_behaviour(self, **changes: Any) -> FauxChatBehaviour:
        merged = {**self.behaviour.model_dump(), **changes}
        new = FauxChatBehaviour.model_validate(merged)
        self.set_behaviour(new)
        return new

    def script(self, *replies: FauxChatReply) -> None:
        """Queue ``replies`` after those already scripted."""
        with self._lock:
            self._script.extend(replies)

    def _next_scripted(self, call_key: str | None) -> FauxChatReply | None:
        with self._lock:
            if call_key is not None and call_key in self._behaviour.by_call:
                return self._behaviour.by_call[call_key]
            return self._script.pop(0) if self._script else None

    # --- answering -------------------------------------------------------------------------

    def respond(
        self,
        path: str,
        mode: str,
        retry_after: str | None,
        status: int,
        headers: Mapping[str, str],
        raw: bytes,
        parsed: Any,
        call_key: str | None,
    ) -> FauxResponse:
        """The response to an admitted, counted request (connection modes are handled before)."""
        openrouter = path == PATH_OPENROUTER_CHAT
        flavour: wire.Flavour = "openrouter" if openrouter else "openai"
        extra = {"retry-after": retry_after} if retry_after is not None else {}

        def error(code: int, message: str | None = None, loc: Any = None) -> FauxResponse:
            return json_response(code, error_body(flavour, code, message, loc=loc), extra)

        if len(raw) > wire.MAX_BODY_BYTES:
            return error(413)
        if not _authorised(headers):
            return error(401)
        if mode in ("rate_limit", "status"):
            return error(429 if mode == "rate_limit" else status)
        if mode in ("garbage", "deep_json"):
            bad = _GARBAGE if mode == "garbage" else _DEEP_JSON
            return FauxResponse(200, {"content-type": "application/json"}, bad)
        if parsed is None:
            return error(400, "body is not JSON")
        try:
            body = _check(parsed)
        except _Invalid as problem:
            return error(400, problem.message, problem.loc)
        messages = body["messages"]
        message: ReplyMessage
        if mode == "refuse":
            message = (None, "I can't help with that.", [], "stop")
        else:
            scripted = self._next_scripted(call_key)
            message = (
                scripted_reply(scripted, messages)
                if scripted is not None
                else deterministic_reply(
                    messages, body.get("tools"), use_tools=self._behaviour.use_tools
                )
            )
        return json_response(200, self._completion(body, raw, message, openrouter=openrouter))

    @staticmethod
    def _completion(
        body: Mapping[str, Any],
        raw: bytes,
        message: ReplyMessage,
        *,
        openrouter: bool,
    ) -> dict[str, Any]:
        content, refusal, tool_calls, finish = message
        out_message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
        if tool_calls:
            out_message["tool_calls"] = tool_calls
        prompt_tokens = estimate_tokens(len(raw))
        completion_tokens = estimate_tokens(len((content or "") + json.dumps(tool_calls)))
        bound = next((body[n] for n in _TOKEN_BOUNDS if body.get(n) is not None), None)
        if bound is not None and completion_tokens > bound:
            # Cut off at the bound, as a host does: what was written so far, no tool call.
            content, tool_calls, finish = (content or "")[: bound * 4], [], "length"
            completion_tokens = bound
            out_message = {"role": "assistant", "content": content, "refusal": refusal}
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if openrouter:
            cost = (prompt_tokens * PRICE_IN_PER_MTOK + completion_tokens * PRICE_OUT_PER_MTOK)
            usage["cost"] = round(cost / 1e6, 12)
        prefix = "gen-" if openrouter else "chatcmpl-"
        return {
            "id": prefix + secrets.token_hex(12),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": finish, "message": out_message}],
            "usage": usage,
        }

    # --- control (``/_faux/chat``) ---------------------------------------------------------

    def behaviour_response(self) -> FauxResponse:
        return json_response(200, self.behaviour.model_dump(mode="json"))

    def put_behaviour(self, raw: bytes, *, merge: bool) -> FauxResponse:
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return json_response(400, {"error": "the body must be a JSON object"})
        try:
            if merge:
                self.update_behaviour(**parsed)
            else:
                self.set_behaviour(FauxChatBehaviour.model_validate(parsed))
        except ValidationError as exc:
            problems = [
                {"loc": [str(p) for p in e["loc"]], "message": e["msg"]} for e in exc.errors()
            ]
            return json_response(422, {"error": "invalid chat behaviour", "problems": problems})
        return self.behaviour_response()
