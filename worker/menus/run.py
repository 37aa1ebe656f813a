"""One delivery of one menu job: the session driven step by step, then the terminal message.

``MenuRun.run`` feeds the ``DecisionSession`` (``shared.menus``) what each step brings: a
model call's reply (``ModelCalls``), a tool's result, the handler's value (``Executions``);
``finish`` stores the terminal message with the last call's outcome in one transaction and
publishes it once.
"""

from __future__ import annotations

from shared.errors import DecisionError
from shared.menus import Decided, ModelStep, ToolStep
from shared.menus.session import SessionAction
from shared.replies import EscalationReason
from worker.ledger import CallOutcome, ClaimLost, JobRow
from worker.menus.base import HANDLER_PROVIDER, HANDLER_STEP, End, TerminalMessage
from worker.menus.executions import Executions
from worker.menus.messages import menu_result
from worker.menus.model_calls import ModelCalls

__all__ = ["MenuRun"]


class MenuRun(ModelCalls, Executions):
    """Drives one delivery of one menu job to its end."""

    async def run(self) -> End:
        session = self.plan.session(self.runtime_for(HANDLER_STEP))
        self.session = session
        action: SessionAction = session.start()
        while True:
            if isinstance(action, ModelStep):
                step = self.turn = action.step
                reply = await self.model_call(action)
                if isinstance(reply, End):
                    return reply
                try:
                    action = session.on_reply(reply)
                except DecisionError as error:
                    detail = (
                        f"no valid pick after {error.attempts} attempt(s): "
                        f"{error.kind}: {error.message}"
                    )
                    return End(self.escalate("menu_unparseable", detail, step=step))
            elif isinstance(action, ToolStep):
                content = await self.tool_call(action)
                if isinstance(content, End):
                    return content
                action = session.on_tool_result(content)
            elif isinstance(action, Decided):
                return await self.resolve(action.pick)
            else:  # Finished: a turn without a menu, which a menu job never is
                return End(menu_result(self.job, action.text, list(self.receipts)))

    # --- the end ---------------------------------------------------------------------------

    async def finish(self, end: End) -> str:
        if end.row is not None:
            return await self.runner._publish(end.row, self.job.reply_to)
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
        return await self.runner._publish(row, self.job.reply_to)

    async def store(self, message: TerminalMessage, outcome: CallOutcome | None) -> JobRow:
        row: JobRow = await self.db(
            self.ledger.finish_job,
            job_id=self.job.id,
            message_type=message.type,
            reason=getattr(message, "reason", None),
            message_json=message.to_json(),
            outcome=outcome,
        )
        self.owner.boundary("after_record", self.job.id, end_step(outcome))
        self.runner.observer.job_finished(
            "menu", self.plan.runtime.name, message.type, getattr(message, "reason", None)
        )
        self.log.info("job.finished", outcome=message.type, reason=getattr(message, "reason", None))
        return row


def end_step(outcome: CallOutcome | None) -> str:
    return outcome.step if outcome is not None else "(terminal)"
