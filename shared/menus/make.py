"""The synchronous entry points: ``make`` (pure decision) and ``run_turn`` (work, then decide).

Both are thin drivers over ``DecisionSession``: they call the runtime for each
``ModelStep``, run each ``ToolStep`` in-process, and resolve the pick. The runtime is the
explicit ``runtime=``, else the one bound by ``bind_runtime``; with neither, ``RuntimeError``
(raised before anything else is looked at). Malformed options, a missing context key or an
injection that cannot be filled raise ``TypeError``/``ValueError`` before any model call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.menus.runtime import Runtime, resolve_runtime
from shared.menus.session import (
    DEFAULT_MAX_STEPS,
    Decided,
    DecisionSession,
    Finished,
    ModelStep,
    SessionAction,
    ToolStep,
)

__all__ = ["drive", "make", "run_turn"]


def make(
    prompt: str,
    options: Any,
    *,
    runtime: Runtime | None = None,
    context: Mapping[str, Any] | None = None,
    max_retries: int = 1,
) -> Any:
    """Send ``prompt`` plus the menu, parse the pick (re-asking up to ``max_retries`` times),
    and return the result of the next step: the handler's return value, the value, or
    ``{"decision": name, **fields}``. Exhausted retries raise ``DecisionError``."""
    rt = resolve_runtime(runtime)
    session = DecisionSession.for_make(
        prompt, options, context=context, runtime=rt, max_retries=max_retries
    )
    outcome = drive(session, rt)
    return outcome.resolve() if isinstance(outcome, Decided) else outcome.text


def run_turn(
    prompt: str,
    *,
    choices: Any | None = None,
    tools: Any = None,
    runtime: Runtime | None = None,
    context: Mapping[str, Any] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Any:
    """One work turn: the model may call ``tools`` for up to ``max_steps`` model turns, and
    its closing reply must pick one of ``choices`` (resolved as by ``make``, one retry).
    Without ``choices`` it returns the final reply's text."""
    rt = resolve_runtime(runtime)
    session = DecisionSession.for_turn(
        prompt, choices, tools=tools, context=context, runtime=rt, max_steps=max_steps
    )
    outcome = drive(session, rt)
    return outcome.resolve() if isinstance(outcome, Decided) else outcome.text


def drive(session: DecisionSession, runtime: Runtime) -> Decided | Finished:
    """Run a session to its outcome, synchronously and in-process."""
    action: SessionAction = session.start()
    while True:
        if isinstance(action, ModelStep):
            action = session.on_reply(runtime.exec(action.messages, tools=action.tools))
        elif isinstance(action, ToolStep):
            action = session.on_tool_result(action.run())
        else:
            return action
