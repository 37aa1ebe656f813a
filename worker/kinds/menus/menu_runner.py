"""The menu runner: a menu job from its JSON to its one terminal message, every call at most once.

    validate ─▶ resolve handlers/runtime (rejected if not) ─▶ open the job row ─▶
    for each step of the session (pick.0, turn.N, tool.N, pick.1, ..., handler):
        claim (committed) ─▶ call the model / run the tool or handler ─▶ record the outcome
    ─▶ the terminal message, stored with the last outcome ─▶ publish once

``DecisionSession`` (``shared.menus``) decides what each step is; this module makes each one a
ledger call keyed ``(job id, step)``. A redelivered job walks the same steps: a step whose
outcome is stored is replayed (a model reply is fed to the session again, never re-asked; a
tool's result is given back; a finished handler's value is the result, never re-run); a step
claimed and never recorded is never done again: once its lease is over it is booked
``unknown`` and the job escalates, ``decision_interrupted`` for a model call,
``handler_interrupted`` for a tool or handler (which may have had its effect). A live
duplicate's claim (its lease still runs) is waited for, as in the decide path.

Escalations: retries spent (``DecisionError``) → ``menu_unparseable`` with the menu and the
last reply; a tool or handler raising → ``handler_failed`` with the error (the model is not
asked again); a runtime failure → as the decide path names it (``provider_error``,
``decision_interrupted``, ``deadline_exceeded``). A step due after the deadline is not done:
``deadline_exceeded``, unless an earlier delivery left its outcome, which is replayed.

Handlers and tools run in a thread (``asyncio.to_thread``), so the loop keeps serving the
chunk's other jobs. A handler parameter typed ``Runtime`` gets a runtime whose model calls
are ledger calls too (``handler.call.0``, ``tool.2.call.0``, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from shared.errors import FieldProblem, JobInvalid
from shared.jobs import AnyJob, MenuJob
from shared.menus import Message, ModelReply, ToolSpec
from worker.delivery import Delivery
from worker.kinds.menus.plan import MenuPlan, prepare_menu
from worker.kinds.menus.session_steps import MenuRun
from worker.process.faults import fault_point
from worker.runtimes import RuntimeRegistry

__all__ = ["Boundary", "MenuRunner"]

log = structlog.get_logger("decisions.menus")

#: ``(point, job_id, step)``: called at each step boundary (after_claim, after_response,
#: after_record); the fault points of ``worker.process.faults`` are called there too.
Boundary = Callable[[str, str, str], None]


class _Unbound:
    """Stands for the runtime handlers get, while a job is checked (never called)."""

    def exec(self, messages: list[Message], *, tools: list[ToolSpec] | None = None) -> ModelReply:
        raise RuntimeError("no runtime is bound while a menu job is being checked")


class MenuRunner:
    """Runs menu jobs on a ``Delivery`` (the protocol every job kind shares)."""

    def __init__(
        self,
        delivery: Delivery,
        *,
        handlers: Mapping[str, Callable[..., Any]],
        runtimes: RuntimeRegistry,
        on_boundary: Boundary | None = None,
    ) -> None:
        self.delivery = delivery
        self.handlers = handlers
        self.runtimes = runtimes
        self.on_boundary = on_boundary

    def prepare(self, job: AnyJob) -> MenuPlan:
        """The job resolved against this worker; ``JobInvalid`` naming each field otherwise."""
        if not isinstance(job, MenuJob):
            raise JobInvalid([FieldProblem("kind", "not a menu job")], job.id)
        return prepare_menu(job, self.handlers, self.runtimes, injection_runtime=_Unbound())

    async def run_one(self, raw: Any) -> str:
        """Run one menu job; returns the type of its terminal message."""
        delivery = self.delivery
        checked = await delivery.validate(raw, self.prepare)
        if isinstance(checked, str):
            return checked
        job, plan = checked
        row = await delivery.open(raw, job)
        if isinstance(row, str):
            return row
        run = MenuRun(self, plan, row.deadline)
        end = await run.run()
        if end.cancelled:
            # Record what the cancel left behind before letting the cancel unwind the task.
            await asyncio.shield(run.finish(end))
            raise asyncio.CancelledError
        return await run.finish(end)

    def boundary(self, point: str, job_id: str, step: str) -> None:
        fault_point(point, job_id)
        if self.on_boundary is not None:
            self.on_boundary(point, job_id, step)
