"""The model seam: what the engine sends, what comes back, and where the runtime comes from.

``Runtime.exec(messages, *, tools)`` is one chat-completions call. ``messages`` are
OpenAI-shaped dicts (``role``/``content``, assistant ``tool_calls``, ``tool`` results with
``tool_call_id``); ``tools`` are native function tools the model may call (``None`` when
none are offered). The reply says why the model stopped (``finish_reason``: ``stop``,
``length``, ``tool_calls``, ``content_filter``), carries a refusal separately from text, and
any native tool calls with their raw argument text. Implementations: the OpenAI-compatible
httpx runtime and the worker's ledgered runtime (elsewhere), ``faux.ScriptedRuntime`` here.

``make``/``run_turn`` take the runtime of the enclosing ``bind_runtime`` (a context manager
and a decorator, on a ``contextvars`` variable, so it follows asyncio tasks but not new
threads); an explicit ``runtime=`` wins; with neither they raise ``RuntimeError``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, Required, TypedDict, TypeVar

__all__ = [
    "Message",
    "ModelReply",
    "Runtime",
    "ToolCall",
    "ToolSpec",
    "bind_runtime",
    "current_runtime",
    "resolve_runtime",
]

F = TypeVar("F", bound=Callable[..., Any])


class Message(TypedDict, total=False):
    """One chat message, in the chat-completions wire shape (JSON-ready)."""

    role: Required[Literal["system", "user", "assistant", "tool"]]
    content: str | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str


@dataclass(frozen=True)
class ToolSpec:
    """A native tool offered to the model; ``parameters`` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A native tool call from the model. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"

    @classmethod
    def of(cls, id: str, name: str, args: dict[str, Any]) -> ToolCall:
        return cls(id, name, json.dumps(args, ensure_ascii=False))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ModelReply:
    """One model turn's outcome. ``text`` may be ``None`` (only tool calls, or a refusal)."""

    text: str | None = None
    finish_reason: str | None = "stop"
    tool_calls: tuple[ToolCall, ...] = field(default=())
    refusal: str | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def refused(self) -> bool:
        return bool(self.refusal) or self.finish_reason == "content_filter"


class Runtime(Protocol):
    """An LLM endpoint. One ``exec`` is one paid model call."""

    def exec(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None
    ) -> ModelReply: ...


_CURRENT: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "menus_runtime", default=None
)


def current_runtime() -> Runtime | None:
    """The runtime bound by the innermost enclosing ``bind_runtime``, if any."""
    return _CURRENT.get()


def resolve_runtime(explicit: Runtime | None = None) -> Runtime:
    """``explicit`` if given, else the bound runtime; ``RuntimeError`` when there is none."""
    runtime = explicit if explicit is not None else _CURRENT.get()
    if runtime is None:
        raise RuntimeError(
            "no runtime: pass runtime= or call inside `with bind_runtime(runtime):` "
            "(or a function decorated with @bind_runtime(runtime))"
        )
    return runtime


class bind_runtime:
    """Bind ``runtime`` for the enclosed block or for every call of the decorated function."""

    def __init__(self, runtime: Runtime) -> None:
        if runtime is None:
            raise TypeError("bind_runtime needs a runtime, got None")
        self.runtime = runtime
        self._tokens: list[contextvars.Token[Runtime | None]] = []

    def __enter__(self) -> Runtime:
        self._tokens.append(_CURRENT.set(self.runtime))
        return self.runtime

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _CURRENT.reset(self._tokens.pop())

    def __call__(self, func: F) -> F:
        runtime = self.runtime
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                token = _CURRENT.set(runtime)
                try:
                    return await func(*args, **kwargs)
                finally:
                    _CURRENT.reset(token)

            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            token = _CURRENT.set(runtime)
            try:
                return func(*args, **kwargs)
            finally:
                _CURRENT.reset(token)

        return run  # type: ignore[return-value]
