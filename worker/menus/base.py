"""What every step of a menu run shares: its state, the ledger helpers, the run's end.

``RunBase`` holds one delivery's state (the plan, deadline and lease, the receipts so far,
the session) and what every kind of step needs: waiting out another delivery's claim
(``await_claim``), the deadline rule (``late``), escalations carrying the menu
(``escalate``), and the runtime a handler is given (``runtime_for``: its model calls are
ledger calls too). ``End`` is how a run ends: a message to store with the last call's
outcome, or a row another delivery finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from shared.menus import DecisionSession, FunctionOption, Message, ModelReply, ToolSpec
from shared.replies import EscalationMessage, EscalationReason, Receipt, ResultMessage
from worker.ledger import CallOutcome, CallRow, JobRow
from worker.menus.messages import menu_context, menu_escalation
from worker.menus.plan import MenuPlan
from worker.runtimes import BlockingRuntime

if TYPE_CHECKING:
    from worker.menus.runner import MenuRunner

__all__ = [
    "CLAIM_POLL_S",
    "HANDLER_PROVIDER",
    "HANDLER_STEP",
    "End",
    "RunBase",
    "TerminalMessage",
    "now",
]

log = structlog.get_logger("decisions.menus")

#: The ledger's ``provider`` of a tool or handler execution (its ``model`` is the handler).
HANDLER_PROVIDER = "handler"
HANDLER_STEP = "handler"
#: How often a delivery that found a live duplicate's claim looks again.
CLAIM_POLL_S = 1.0

TerminalMessage = ResultMessage | EscalationMessage


def now() -> datetime:
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
        self.runner = owner.runner
        self.ledger = owner.runner.ledger
        self.plan = plan
        self.job = plan.job
        self.deadline = deadline
        self.lease = deadline + timedelta(seconds=owner.runner.settings.lease_margin_s)
        self.receipts: list[Receipt] = []
        self.session: DecisionSession | None = None
        self.turn = "pick.0"
        self.nested: dict[str, int] = {}
        self.log = log.bind(job_id=self.job.id, batch=self.job.batch, runtime=plan.runtime.name)

    async def db(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        return await self.runner._db(fn, **kwargs)

    def escalate(
        self, reason: EscalationReason, detail: str, *, step: str | None = None
    ) -> EscalationMessage:
        context = menu_context(
            self.job,
            self.plan.menu,
            runtime=self.plan.runtime.name,
            model=self.plan.model,
            session=self.session,
            step=step,
        )
        return menu_escalation(self.job, reason, detail, list(self.receipts), context)

    async def await_claim(self, step: str, call: CallRow) -> CallRow | End:
        """Wait out a live duplicate's claim; an expired one is booked ``unknown``."""
        while call.status == "claimed":
            moment = now()
            if call.lease_expires < moment:
                expired: CallRow = await self.db(
                    self.ledger.expire_claim, job_id=self.job.id, step=step, now=moment
                )
                return expired
            await asyncio.sleep(min(CLAIM_POLL_S, (call.lease_expires - moment).total_seconds()))
            row = await self.db(self.ledger.get_job, job_id=self.job.id)
            if row is not None and row.terminal_message is not None:
                return End(row=row)
            latest = await self.db(self.ledger.get_call, job_id=self.job.id, step=step)
            assert latest is not None, "a claimed call never disappears"
            call = latest
        return call

    async def late(self, step: str, what: str) -> CallRow | End:
        """Past the deadline: an earlier delivery's outcome of ``step`` stands, else nothing."""
        earlier = await self.db(self.ledger.get_call, job_id=self.job.id, step=step)
        if earlier is not None and earlier.status != "not_sent":
            row: CallRow = earlier
            return row
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
