"""One delivery of one menu job: the session driven step by step, then the terminal message.

``MenuRun.run`` feeds the ``DecisionSession`` (``shared.menus``) what each step brings: a
model call's reply (``ModelCalls``), a tool's result, the handler's value (``Executions``);
``finish`` stores the terminal message with the last call's outcome in one transaction and
publishes it once.
"""

from __future__ import annotations

from shared.errors import DecisionError
from shared.menus import Decided, ModelStep, ToolStep
from shared.menus.messages import menu_result
from shared.menus.session import SessionAction
from shared.replies import EscalationReason
from worker.kinds.menus.base import HANDLER_PROVIDER, HANDLER_STEP, End, TerminalMessage
from worker.kinds.menus.executions import Executions
from worker.kinds.menus.model_calls import ModelCalls
from worker.ledger import CallOutcome, ClaimLost, JobRow

__all__ = ["MenuRun"]


class MenuRun(ModelCalls, Executions):
    """Drives one delivery of one menu job to its end."""

    async def run(self) -> End:
        session = self.plan.session(self.runtime_for(HANDLER_STEP))
        self.session = session
        action: SessionAction = session.start()
        in_reply = in_job = 0  # tool calls: met in the last reply, run in the job
        while True:
            if isinstance(action, ModelStep):
                step = self.turn = action.step
                reply = await self.model_call(action)
                if isinstance(reply, End):
                    return reply
                in_reply = 0
                try:
                    action = session.on_reply(reply)
                except DecisionError as error:
                    detail = (
                        f"no valid pick after {error.attempts} attempt(s): "
                        f"{error.kind}: {error.message}"
                    )
                    return End(self.escalate("menu_unparseable", detail, step=step))
            elif isinstance(action, ToolStep):
                in_reply += 1
                over = self.over_tool_bound(in_reply, in_job + 1)
                if over is None:
                    in_job += 1
                content = over if over is not None else await self.tool_call(action)
                if isinstance(content, End):
                    return content
                action = session.on_tool_result(content)
            elif isinstance(action, Decided):
                return await self.resolve(action.pick)
            else:  # Finished: a turn without a menu, which a menu job never is
                return End(menu_result(self.job, action.text, list(self.receipts)))

    def over_tool_bound(self, in_reply: int, in_job: int) -> str | None:
        """What the model is told instead of a tool's result when the call is over a bound
        (``work.max_tool_calls_per_reply``, ``work.max_tool_calls``); None when it may run.

        A call over a bound is never claimed nor run: a reply asking for 200 tool calls runs
        the first few, and a redelivery, given the same replies, skips the same ones."""
        work = self.job.work
        if work is None:
            return None
        if in_reply > work.max_tool_calls_per_reply:
            bound = f"{work.max_tool_calls_per_reply} a reply (work.max_tool_calls_per_reply)"
        elif in_job > work.max_tool_calls:
            bound = f"{work.max_tool_calls} a job (work.max_tool_calls)"
        else:
            return None
        if in_reply == work.max_tool_calls_per_reply + 1 or in_reply == 1:
            self.log.warning("tool.bound_reached", step=self.turn, bound=bound)
        return f"not run: at most {bound} tool calls are run"

    # --- the end ---------------------------------------------------------------------------

    async def finish(self, end: End) -> str:
        if end.row is not None:
            return await self.delivery.publish(end.row, self.job.reply_to)
        message = end.message
        assert message is not None
        try:
            row = await self.store(message, end.outcome)
        except ClaimLost as lost:
            # The last call's lease ran out and another delivery booked it unknown: that
            # verdict stands; never overwrite it.
            self.log.warning("call.claim_lost", step=end.step, stored=lost.call.status)
            reason: EscalationReason = (
                "handler_interrupted"
                if lost.call.provider == HANDLER_PROVIDER
                else "decision_interrupted"
            )
            detail = f"{end.step}: its claim ran out before its outcome was recorded"
            row = await self.store(self.escalate(reason, detail, step=end.step), None)
        return await self.delivery.publish(row, self.job.reply_to)

    async def store(self, message: TerminalMessage, outcome: CallOutcome | None) -> JobRow:
        async def write() -> JobRow:
            return await self.delivery.ledger.finish_job(
                job_id=self.job.id,
                message_type=message.type,
                reason=getattr(message, "reason", None),
                message_json=message.to_json(),
                outcome=outcome,
            )

        # An outcome may have been paid for (or be a handler's effect): held through an outage.
        row = await (
            write()
            if outcome is None
            else self.delivery.hold_through_outage(write, f"finish {self.job.id}")
        )
        self.owner.boundary("after_record", self.job.id, end_step(outcome))
        self.delivery.observer.job_finished(
            "menu", self.plan.runtime.name, message.type, getattr(message, "reason", None)
        )
        self.log.info("job.finished", outcome=message.type, reason=getattr(message, "reason", None))
        return row


def end_step(outcome: CallOutcome | None) -> str:
    return outcome.step if outcome is not None else "(terminal)"
