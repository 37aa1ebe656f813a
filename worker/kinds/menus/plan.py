"""From a validated menu job to what the worker runs: its menu, tools, runtime and session.

``prepare_menu`` resolves everything a job names against this worker: handler names in the
handler registry, the runtime and model in the runtime registry, ``FromContext`` parameters
in the job's ``context``. Whatever does not resolve is a ``JobInvalid`` naming each field
(``options[2].handler``, ``work.tools[0]``, ``runtime.model``, ``context``), so the job is
``rejected`` before any model call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import FieldProblem, JobInvalid
from shared.job_parsing import menu_problems
from shared.jobs import MenuJob
from shared.menus import (
    DecisionSession,
    FunctionOption,
    Menu,
    MenuSpecInvalid,
    Runtime,
    build_menu,
    check_injections,
    menu_from_json,
    normalize_tools,
)
from worker.runtimes import ChatRuntime, RuntimeRegistry

__all__ = ["MenuPlan", "prepare_menu"]


@dataclass(frozen=True)
class MenuPlan:
    job: MenuJob
    menu: Menu
    tools: tuple[FunctionOption, ...]
    runtime: ChatRuntime
    model: str | None

    def session(self, runtime: Runtime) -> DecisionSession:
        """A new session; ``runtime`` is what handlers that take a runtime are given."""
        job = self.job
        if job.work is None:
            return DecisionSession.for_make(
                job.prompt, self.menu, context=job.context, runtime=runtime,
                max_retries=job.max_retries,
            )
        return DecisionSession.for_turn(
            job.prompt, self.menu, tools=self.tools or None, context=job.context,
            runtime=runtime, max_steps=job.work.max_steps,
        )


def prepare_menu(
    job: MenuJob,
    handlers: Mapping[str, Callable[..., Any]],
    runtimes: RuntimeRegistry,
    *,
    injection_runtime: Runtime,
) -> MenuPlan:
    problems = menu_problems(job.options, handlers)
    tools: dict[str, Callable[..., Any]] = {}
    for i, name in enumerate(job.work.tools if job.work else []):
        if name in handlers:
            tools[name] = handlers[name]
        else:
            known = ", ".join(sorted(handlers)) or "none"
            problems.append(
                FieldProblem(f"work.tools[{i}]", f"unknown handler {name!r} (registered: {known})")
            )
    problems += runtimes.check(job.runtime.provider, job.runtime.model)
    unbounded = runtimes.unbounded(job.runtime.provider)
    if job.budget_usd is not None and unbounded is not None:
        # Each model call reserves its worst case: without one, nothing could be reserved.
        runtime_name = job.runtime.provider or runtimes.default_name
        problems.append(
            FieldProblem(
                "budget_usd",
                f"menu runtime {runtime_name} has no known maximum cost a call, so a menu job "
                f"cannot run under a budget: set {unbounded}, or drop budget_usd",
            )
        )
    if problems:
        raise JobInvalid(problems, job.id)
    try:
        menu = build_menu(menu_from_json(job.options, handlers))
        tool_options = normalize_tools(tools)
    except (MenuSpecInvalid, TypeError, ValueError) as exc:
        raise JobInvalid([FieldProblem("options", str(exc))], job.id) from None
    try:
        check_injections((*menu.options, *tool_options), job.context, injection_runtime)
    except TypeError as exc:
        raise JobInvalid([FieldProblem("context", str(exc))], job.id) from None
    runtime = runtimes.get(job.runtime.provider)
    return MenuPlan(job, menu, tool_options, runtime, job.runtime.model or runtime.default_model())
