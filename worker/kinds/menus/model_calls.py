"""The model calls of a menu run: each one claimed, sent, recorded; or replayed, never re-sent.

``pick.N`` and ``turn.N`` steps, and a handler's own calls (``handler.call.N``), go through
the chat runtime's two halves around the ledger's claim, like the decide path: a failure is
the run's end with the call's outcome (``decision_interrupted`` for one that may have been
received, ``provider_error`` otherwise); a call another delivery claimed is replayed from
its stored reply, waited for, or escalated. A stored reply that cannot be read (a damaged
row) is a reply not known: ``decision_interrupted``, naming the call; never asked again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from shared.errors import DecisionProviderError
from shared.menus import Message, ModelReply, ModelStep, ToolSpec
from shared.replies import Receipt
from worker.delivery import (
    budget_ask,
    call_status,
    failure_reason,
    outcome_of,
    stored_outcome,
    stored_receipt,
    unreadable,
)
from worker.kinds.menus.base import End, RunBase
from worker.kinds.menus.stored import reply_from_outcome, reply_outcome
from worker.ledger import BudgetRefusal, CallRow, Claim, ClaimLost, JobRow
from worker.providers import was_cancelled
from worker.runtimes.chat import PreparedChat

__all__ = ["MAX_CONVERSATION_GROWTH", "ModelCalls"]

#: How many bytes a menu's conversation may grow past its first request. Every turn sends
#: the whole conversation again, and a reply (up to DECISIONS_MAX_RESPONSE_BYTES) joins it
#: with an answer to each of its tool calls: found by an attack, 256 calls of 15.6 KB a
#: reply grew every request by 4 MB a turn, to 125 MB by turn 32 and 669 MB of memory for
#: one job. Relative to the first request, so that a job's own large context stays free.
MAX_CONVERSATION_GROWTH = 8 * 2**20


class ModelCalls(RunBase):
    # --- model calls -------------------------------------------------------------------------

    def prepare_call(
        self, step: str, messages: list[Message], tools: list[ToolSpec] | None
    ) -> PreparedChat:
        return self.plan.runtime.prepare(
            messages, tools, model=self.plan.model, call_key=f"{self.job.id}/{step}"
        )

    def grown(self, size: int) -> str | None:
        """Why a request of ``size`` bytes is not sent: its conversation grew more than
        ``MAX_CONVERSATION_GROWTH`` past its first request; None when it may be."""
        first = self.first_request_bytes = self.first_request_bytes or size
        if size - first <= MAX_CONVERSATION_GROWTH:
            return None
        return (
            f"the conversation grew to {size} bytes, {size - first} past its first request "
            f"(at most {MAX_CONVERSATION_GROWTH}): the model's replies are too long to go on; "
            "the next request was not sent"
        )

    async def claim_call(self, step: str, prepared: PreparedChat) -> Claim | JobRow | End:
        """The model call's claim, reserving its worst case under a budget (the batch's, or
        a daily ceiling for the runtime); one it does not fit, or a runtime with no known
        maximum (``ChatConfig.unbounded``), ends the run ``budget_exhausted``: nothing sent."""
        claimed = await self._claim(step, prepared)
        if isinstance(claimed, BudgetRefusal):
            detail = claimed.detail()
            unbounded = self.plan.runtime.config.unbounded
            if claimed.worst_usd is None and unbounded is not None:
                detail = (
                    f"{claimed.field}: menu runtime {prepared.runtime} has no known maximum cost "
                    f"a call, so it cannot run under budget {claimed.scope}: set {unbounded}; "
                    "nothing was sent"
                )
            return End(self.escalate("budget_exhausted", detail, step=step))
        return claimed

    async def _claim(self, step: str, prepared: PreparedChat) -> Claim | JobRow | BudgetRefusal:
        worst = self.plan.runtime.worst_cost(prepared)
        return await self.delivery.claim(
            self.job.id,
            step,
            provider=prepared.runtime,
            model=prepared.model,
            request_sha256=prepared.request_sha256,
            deadline=self.deadline,
            budget=budget_ask(self.delivery.settings, self.job, prepared.runtime, worst),
        )

    async def model_call(self, action: ModelStep) -> ModelReply | End:
        step = action.step
        try:
            prepared = self.prepare_call(step, action.messages, action.tools)
        except DecisionProviderError as exc:
            return End(self.escalate("provider_error", str(exc), step=step))
        grew = self.grown(len(prepared.body))
        if grew is not None:
            return End(self.escalate("menu_unparseable", grew, step=step))
        if self.late():
            late = await self.past_deadline(step, "the model call was not made")
            if isinstance(late, End):
                return late
            return await self.settle_model(step, late)
        claim = await self.claim_call(step, prepared)
        if isinstance(claim, End):
            return claim
        if isinstance(claim, JobRow):
            return End(row=claim)
        if not claim.fresh:
            return await self.settle_model(step, claim.call)
        self.owner.boundary("after_claim", self.job.id, step)
        sent = await self.send(step, prepared)
        if isinstance(sent, End):
            return sent
        reply, receipt = sent
        self.owner.boundary("after_response", self.job.id, step)
        outcome = outcome_of("answered", receipt, reply_outcome(reply), None)
        outcome = replace(outcome, claims=claim.call.claims)  # onto this claim only
        try:
            await self.delivery.record(self.job.id, outcome)
        except ClaimLost as lost:
            self.log.warning("call.claim_lost", step=step, stored=lost.call.status)
            return await self.settle_model(step, lost.call)
        self.owner.boundary("after_record", self.job.id, step)
        self.receipts.append(receipt)
        return reply

    async def send(self, step: str, prepared: PreparedChat) -> tuple[ModelReply, Receipt] | End:
        """Send a claimed model call; a failure is the run's end, with the call's outcome."""
        runtime = self.plan.runtime
        observer = self.delivery.observer
        observer.call_started(runtime.name)
        started = time.monotonic()
        try:
            result = await runtime.send(prepared, self.delivery.local(self.deadline), step=step)
        except DecisionProviderError as exc:
            status = call_status(exc)
            receipt = exc.receipt if isinstance(exc.receipt, Receipt) else self.bare(step, prepared)
            receipt = receipt.model_copy(update={"status": status, "error_code": exc.code})
            if status != "not_sent":
                self.delivery.stats.add(receipt)
            observer.call_finished(
                runtime.name, status, time.monotonic() - started, receipt.cost_usd,
                receipt.cost_basis,
            )
            self.receipts.append(receipt)
            self.log.info("call.failed", step=step, code=exc.code, status=status)
            return End(
                self.escalate(failure_reason(exc), str(exc), step=step),
                outcome_of(status, receipt, None, exc.code),
                cancelled=was_cancelled(exc),
                step=step,
            )
        except asyncio.CancelledError:
            receipt = self.bare(step, prepared).model_copy(update={"error_code": "aborted"})
            self.receipts.append(receipt)
            message = self.escalate("decision_interrupted", "cancelled while in flight", step=step)
            outcome = outcome_of("unknown", receipt, None, "aborted")
            return End(message, outcome, cancelled=True, step=step)
        except Exception as exc:
            # A bug after the claim: whether bytes left is unknown, so never send again.
            self.log.exception("call.crashed", step=step, error=type(exc).__name__)
            receipt = self.bare(step, prepared).model_copy(update={"error_code": "internal"})
            self.receipts.append(receipt)
            detail = f"internal error: {type(exc).__name__}"
            message = self.escalate("decision_interrupted", detail, step=step)
            return End(message, outcome_of("unknown", receipt, None, "internal"), step=step)
        self.delivery.stats.add(result.receipt)
        observer.call_finished(
            runtime.name, "answered", time.monotonic() - started, result.receipt.cost_usd,
            result.receipt.cost_basis,
        )
        self.log.info("call.answered", step=step, finish_reason=result.reply.finish_reason)
        return result.reply, result.receipt

    def bare(self, step: str, prepared: PreparedChat) -> Receipt:
        return Receipt(
            step=step,
            provider=prepared.runtime,
            model=prepared.model,
            status="unknown",
            request_sha256=prepared.request_sha256,
        )

    async def settle_model(self, step: str, call: CallRow) -> ModelReply | End:
        """Another delivery claimed this model call: never send; replay, wait, or escalate."""
        got = await self.await_claim(step, call)
        if isinstance(got, End):
            return got
        self.receipts.append(stored_receipt(got))
        if got.status == "answered":
            reply = stored_outcome(got, reply_from_outcome)
            if reply is None:
                return End(self.escalate("decision_interrupted", unreadable(got), step=step))
            self.log.info("call.replayed", step=step)
            return reply
        if got.status == "failed":
            detail = f"the runtime failed: {got.error_code}"
            return End(self.escalate("provider_error", detail, step=step))
        detail = (
            f"{step}: a delivery was interrupted with the model call possibly sent; "
            "it is never sent again"
        )
        return End(self.escalate("decision_interrupted", detail, step=step))

    async def nested_call(
        self, parent: str, messages: list[Message], tools: list[ToolSpec] | None
    ) -> ModelReply:
        # The parent runs at most once, so its calls are always new claims.
        index = self.nested.get(parent, 0)
        self.nested[parent] = index + 1
        step = f"{parent}.call.{index}"
        prepared = self.prepare_call(step, messages, tools)
        if self.late():
            raise DecisionProviderError(
                "timeout", "the deadline passed; nothing was sent", provider=prepared.runtime
            )
        claim = await self._claim(step, prepared)
        if isinstance(claim, BudgetRefusal):
            # A budget refused it: nothing was claimed nor sent. A handler's own call is
            # reported to it as a configuration failure (it was never made), with the
            # figures but not the way on of a budget_exhausted job: its handler has run,
            # so ``decisions budget resume`` does not rerun the job (found by an attack:
            # a handler_failed job said to resume it, and resume took 0 jobs).
            left, worst = claim.left_usd, claim.worst_usd
            why = "no known maximum cost" if worst is None else f"worst case ${worst:.6f}"
            raise DecisionProviderError(
                "configuration",
                f"{step}: budget {claim.scope} cannot take this call ({why}, "
                f"${left:.6f} left); nothing was sent",
                provider=prepared.runtime,
            )
        if isinstance(claim, JobRow) or not claim.fresh:
            raise DecisionProviderError(
                "outcome_unknown", f"{step} was claimed before; it is never sent again",
                provider=prepared.runtime,
            )
        sent = await self.send(step, prepared)
        if isinstance(sent, End):
            assert sent.outcome is not None
            await self.delivery.record(self.job.id, sent.outcome)
            raise DecisionProviderError(
                sent.outcome.error_code or "outcome_unknown",  # type: ignore[arg-type]
                f"{step} failed", provider=prepared.runtime,
            )
        reply, receipt = sent
        outcome = outcome_of("answered", receipt, reply_outcome(reply), None)
        await self.delivery.record(self.job.id, outcome)
        self.receipts.append(receipt)
        return reply
