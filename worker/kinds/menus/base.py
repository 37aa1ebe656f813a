"""What every step of a menu run shares: its state, the ledger helpers, the run's end.

``RunBase`` holds one delivery's state (the plan, deadline, the receipts so far, the
session) and what every kind of step needs, on the delivery protocol (``worker.delivery``):
waiting out another delivery's claim (``await_claim``), the deadline rule (``late``),
escalations carrying the menu (``escalate``), and the runtime a handler is given
(``runtime_for``: its model calls are ledger calls too). ``End`` is how a run ends: a
message to store with the last call's outcome, or a row another delivery finished.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from shared.menus import DecisionSession, FunctionOption, Message, ModelReply, ToolSpec
from shared.menus.messages import menu_context, menu_escalation
from shared.replies import (
    EscalationMessage,
    EscalationReason,
    Receipt,
    TerminalMessage,
)
from worker.kinds.menus.plan import MenuPlan
from worker.ledger import LOCAL_PROVIDER, CallOutcome, CallRow, JobRow
from worker.runtimes import BlockingRuntime

if TYPE_CHECKING:
    from worker.kinds.menus.menu_runner import MenuRunner

__all__ = [
    "HANDLER_PROVIDER",
    "HANDLER_STEP",
    "End",
    "RunBase",
    "TerminalMessage",
    "now",
]

log = structlog.get_logger("decisions.menus")

#: The ledger's ``provider`` of a tool or handler execution (its ``model`` is the handler).
HANDLER_PROVIDER = LOCAL_PROVIDER
HANDLER_STEP = "handler"



def now() -> datetime:
    """Wall time, for receipts' time stamps only: deadlines go by the ledger's clock."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class End:
    """How a run ends: a message to store with the last call's outcome, or a stored row."""

    message: TerminalMessage | None = None
    outcome: CallOutcome | None = None
    row: JobRow | None = None
    cancelled: bool = False
    #: The step ``outcome`` closes (for a claim lost at the very end).
    step: str | None = None


class RunBase:
    """One delivery of one menu job: its state and the helpers every step uses."""

    def __init__(self, owner: MenuRunner, plan: MenuPlan, deadline: datetime) -> None:
        self.owner = owner
        self.delivery = owner.delivery
        self.plan = plan
        self.job = plan.job
        self.deadline = deadline
        self.receipts: list[Receipt] = []
        self.session: DecisionSession | None = None
        self.turn = "pick.0"
        self.nested: dict[str, int] = {}
        #: The first model request's size: a conversation's growth is bounded from it.
        self.first_request_bytes = 0
        self.log = log.bind(job_id=self.job.id, batch=self.job.batch, runtime=plan.runtime.name)

    def late(self) -> bool:
        return self.delivery.is_late(self.deadline)

    def escalate(
        self,
        reason: EscalationReason,
        detail: str,
        *,
        step: str | None = None,
        pick: dict[str, Any] | None = None,
    ) -> EscalationMessage:
        context = menu_context(
            self.job,
            self.plan.menu,
            runtime=self.plan.runtime.name,
            model=self.plan.model,
            session=self.session,
            step=step,
        )
        if pick is not None:
            # The machine's pick, so that a reviewer's pick labels it (shared.labels).
            context["pick"] = pick
        return menu_escalation(self.job, reason, detail, list(self.receipts), context)

    async def await_claim(self, step: str, call: CallRow) -> CallRow | End:
        """Wait out a live duplicate's claim; an expired one is booked ``unknown``."""
        settled = await self.delivery.await_claim(self.job.id, step, call)
        return End(row=settled) if isinstance(settled, JobRow) else settled

    async def past_deadline(self, step: str, what: str) -> CallRow | End:
        """Past the deadline: an earlier delivery's outcome of ``step`` stands, else nothing."""
        earlier = await self.delivery.earlier_call(self.job.id, step)
        if earlier is not None:
            return earlier
        detail = f"the deadline passed before {step}; {what}"
        return End(self.escalate("deadline_exceeded", detail, step=step))

    # --- a handler's own model calls -------------------------------------------------------

    def runtime_for(self, parent: str) -> BlockingRuntime:
        """The runtime a tool or handler gets: its model calls are ``{parent}.call.N``."""

        async def call(messages: list[Message], tools: list[ToolSpec] | None) -> ModelReply:
            return await self.nested_call(parent, messages, tools)

        return BlockingRuntime(call, loop=asyncio.get_running_loop())

    async def nested_call(
        self, parent: str, messages: list[Message], tools: list[ToolSpec] | None
    ) -> ModelReply:
        raise NotImplementedError  # ModelCalls

    def with_runtime(
        self, option: FunctionOption, kwargs: dict[str, Any], parent: str
    ) -> dict[str, Any]:
        runtime_params = [p.name for p in option.params if p.source == "runtime"]
        if not runtime_params:
            return kwargs
        runtime = self.runtime_for(parent)
        return {**kwargs, **{name: runtime for name in runtime_params}}
