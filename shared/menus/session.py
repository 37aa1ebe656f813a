"""The decision procedure as a sans-I/O state machine (``DecisionSession``).

The session decides what to send and what a reply means; it never calls a model or runs a
handler itself. A driver feeds it: ``start()`` returns the first ``ModelStep``; each reply
goes to ``on_reply`` and each tool result to ``on_tool_result``; both return the next thing
to do: a ``ModelStep`` (one model call), a ``ToolStep`` (one tool execution), ``Decided``
(a validated pick, to resolve) or ``Finished`` (a turn without choices: its final text).
When the retries are spent, ``on_reply`` raises ``shared.errors.DecisionError``.

``make``/``run_turn`` are thin synchronous drivers over it. The worker drives it
asynchronously instead, making every ``ModelStep``, every ``ToolStep`` and the final
resolution a ledger call keyed by ``step``: ``pick.0``, ``pick.1`` ... for picks and re-picks,
``turn.0``, ``turn.1`` ... for the model turns of a work turn (whose re-pick is ``pick.1``),
``tool.0``, ``tool.1`` ... for tool executions. Given the same replies the session takes the
same steps, so a redelivered job maps onto the same ledger rows.

A work turn (``for_turn``) offers its tools on at most ``max_steps`` model turns; a reply
with tool calls on the last of them is not executed: its text must hold the pick (if not,
that is the problem fed back). Its re-pick is fixed at one and offers no tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import DecisionError
from shared.menus.errors import PickError
from shared.menus.menu import Menu, as_menu, check_injections
from shared.menus.option_types import FunctionOption
from shared.menus.parse import Pick, parse_pick
from shared.menus.prompts import (
    build_menu_prompt,
    build_retry_messages,
    build_turn_messages,
    reply_head,
)
from shared.menus.resolve import resolve_decision
from shared.menus.runtime import Message, ModelReply, Runtime, ToolCall, ToolSpec
from shared.menus.tools import (
    assistant_message,
    normalize_tools,
    parse_tool_call,
    tool_error_message,
    tool_result_message,
    tool_specs,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "TURN_RETRIES",
    "Decided",
    "DecisionSession",
    "Finished",
    "ModelStep",
    "SessionAction",
    "ToolStep",
]

#: Model turns a work turn may spend calling tools, unless told otherwise.
DEFAULT_MAX_STEPS = 8
#: The work-turn path retries a failed pick exactly once (the seed's rule).
TURN_RETRIES = 1


@dataclass(frozen=True)
class ModelStep:
    """Send ``messages`` (and offer ``tools``) to the model; feed the reply to ``on_reply``."""

    step: str
    messages: list[Message]
    tools: list[ToolSpec] | None = None


@dataclass(frozen=True)
class ToolStep:
    """Run ``tool`` with ``kwargs``; feed its result to ``on_tool_result``."""

    step: str
    call: ToolCall
    tool: FunctionOption
    kwargs: dict[str, Any]

    def run(self) -> Any:
        return self.tool.func(**self.kwargs)


@dataclass(frozen=True)
class Decided:
    """A validated pick; ``resolve()`` runs the handler or returns the value."""

    pick: Pick
    attempts: int

    def resolve(self) -> Any:
        return resolve_decision(self.pick.option, self.pick.kwargs)


@dataclass(frozen=True)
class Finished:
    """The final reply of a work turn without choices."""

    reply: ModelReply
    text: str


SessionAction = ModelStep | ToolStep | Decided | Finished


class DecisionSession:
    """One ``make`` or ``run_turn``, step by step. Build with ``for_make`` or ``for_turn``."""

    def __init__(
        self,
        prompt: str,
        menu: Menu | None,
        *,
        opening: list[Message],
        first_step: str,
        tools: tuple[FunctionOption, ...] = (),
        context: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        max_retries: int = 1,
        max_steps: int = 1,
    ) -> None:
        self.prompt = prompt
        self.menu = menu
        self.tools = tools
        self.context = context
        self.runtime = runtime
        self.max_retries = max_retries
        self.max_steps = max_steps
        #: One record per failed pick attempt: step, kind, message, path, reply_head.
        self.errors: list[dict[str, str]] = []
        #: The last reply fed in (for a ``menu_unparseable`` escalation: it and ``menu.text``).
        self.last_reply: ModelReply | None = None
        self._messages = list(opening)
        self._specs = tool_specs(tools) if tools else None
        self._turn = 0
        self._attempt = 0
        self._tool_index = 0
        self._queue: list[ToolStep | Message] = []
        self._waiting: ToolStep | None = None
        self._state = "new"
        self._step = first_step

    @classmethod
    def for_make(
        cls,
        prompt: str,
        options: Any,
        *,
        context: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        max_retries: int = 1,
    ) -> DecisionSession:
        _check_count("max_retries", max_retries, 0)
        menu = as_menu(options)
        check_injections(menu.options, context, runtime)
        return cls(
            prompt,
            menu,
            opening=build_menu_prompt(prompt, menu),
            first_step="pick.0",
            context=context,
            runtime=runtime,
            max_retries=max_retries,
        )

    @classmethod
    def for_turn(
        cls,
        prompt: str,
        choices: Any | None,
        *,
        tools: Any = None,
        context: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> DecisionSession:
        _check_count("max_steps", max_steps, 1)
        menu = as_menu(choices) if choices is not None else None
        tool_options = normalize_tools(tools)
        check_injections((*(menu.options if menu else ()), *tool_options), context, runtime)
        return cls(
            prompt,
            menu,
            opening=build_turn_messages(prompt, menu),
            first_step="turn.0",
            tools=tool_options,
            context=context,
            runtime=runtime,
            max_retries=TURN_RETRIES,
            max_steps=max_steps,
        )

    @property
    def messages(self) -> list[Message]:
        """The work conversation so far (a copy)."""
        return list(self._messages)

    def start(self) -> ModelStep:
        self._expect("new")
        self._state = "reply"
        return ModelStep(self._step, list(self._messages), self._specs)

    def on_reply(self, reply: ModelReply | str) -> SessionAction:
        self._expect("reply")
        if isinstance(reply, str):
            reply = ModelReply(text=reply)
        elif not isinstance(reply, ModelReply):
            reply = ModelReply(text=None if reply is None else reply)
        self.last_reply = reply
        working = self._attempt == 0 and self._specs is not None
        if working and reply.tool_calls:
            self._turn += 1
            if self._turn < self.max_steps:
                return self._run_tools(reply)
        if self.menu is None:
            self._state = "done"
            return Finished(reply, reply.text or "")
        try:
            pick = parse_pick(reply, self.menu, context=self.context, runtime=self.runtime)
        except PickError as error:
            if working and reply.tool_calls and error.kind == "no_action":
                error = PickError(
                    "no_action",
                    f"the work budget ({self.max_steps} model turns) is spent and the reply still "
                    "calls tools; give the closing pick now",
                )
            return self._failed(reply, error)
        self._state = "done"
        return Decided(pick, self._attempt + 1)

    def on_tool_result(self, result: Any) -> SessionAction:
        self._expect("tool")
        assert self._waiting is not None
        self._messages.append(tool_result_message(self._waiting.call, result))
        self._waiting = None
        return self._next_queued()

    def _run_tools(self, reply: ModelReply) -> SessionAction:
        self._messages.append(assistant_message(reply))
        for call in reply.tool_calls:
            try:
                tool, kwargs = parse_tool_call(
                    call, self.tools, context=self.context, runtime=self.runtime
                )
            except PickError as error:
                self._queue.append(tool_error_message(call, error))
                continue
            self._queue.append(ToolStep(f"tool.{self._tool_index}", call, tool, kwargs))
            self._tool_index += 1
        return self._next_queued()

    def _next_queued(self) -> SessionAction:
        while self._queue:
            item = self._queue.pop(0)
            if isinstance(item, ToolStep):
                self._waiting = item
                self._state = "tool"
                return item
            self._messages.append(item)
        self._state = "reply"
        self._step = f"turn.{self._turn}"
        return ModelStep(self._step, list(self._messages), self._specs)

    def _failed(self, reply: ModelReply, error: PickError) -> ModelStep:
        self.errors.append(
            {
                "step": self._step,
                "kind": error.kind,
                "message": error.message,
                "path": error.path,
                "reply_head": reply_head(reply),
            }
        )
        if self._attempt >= self.max_retries:
            self._state = "done"
            raise DecisionError(
                error.kind,
                error.message,
                attempts=self._attempt + 1,
                reply_head=reply_head(reply),
                errors=list(self.errors),
            )
        self._attempt += 1
        self._step = f"pick.{self._attempt}"
        assert self.menu is not None
        return ModelStep(
            self._step, build_retry_messages(reply, error, self.menu, prompt=self.prompt), None
        )

    def _expect(self, state: str) -> None:
        if self._state != state:
            raise RuntimeError(f"session is in state {self._state!r}, not {state!r}")


def _check_count(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} is an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
