"""The tool and handler runs of a menu run: each one claimed before it starts, at most once.

A tool (``tool.N``) or the handler (``handler``) runs in a thread once its claim is
committed; its outcome (the result, or the error it raised) is recorded after. A run another
delivery claimed is never started again: its stored outcome stands, and one that started
and never recorded an outcome escalates ``handler_interrupted`` (it may have had its effect).
A stored outcome that cannot be read (a damaged row) is never replaced by a made-up one (an
empty tool result, a null value): what the run returned is not known, and the job escalates
``decision_interrupted`` naming the call; a failed run whose error cannot be read still
escalates ``handler_failed`` (its status says it failed), naming the call.
"""

from __future__ import annotations

import json
import time
from typing import Any

from shared.canonical import digest_of
from shared.menus import Decided, FunctionOption, Pick, ToolStep
from shared.menus.messages import menu_result
from shared.replies import Receipt
from shared.scrub import json_output
from worker.delivery import outcome_of, stored_outcome, stored_receipt, unreadable
from worker.kinds.menus.base import HANDLER_PROVIDER, HANDLER_STEP, End, RunBase, now
from worker.kinds.menus.stored import (
    error_from_outcome,
    error_text,
    handler_outcome,
    head_of,
    jsonable,
    tool_content,
    tool_result_from_outcome,
)
from worker.ledger import BudgetRefusal, CallRow, ClaimLost, JobRow, LedgerUnavailable

__all__ = ["Executions"]


class Executions(RunBase):
    # --- tools and the handler ----------------------------------------------------------------

    async def claim_execution(
        self, step: str, name: str, request: dict[str, Any]
    ) -> CallRow | End | None:
        """Claim a tool or handler run; ``None`` when this delivery may run it now."""
        if self.late():
            return await self.past_deadline(step, f"{name} was not run")
        claim = await self.delivery.claim(
            self.job.id,
            step,
            provider=HANDLER_PROVIDER,
            model=name,
            request_sha256=digest_of(request),
            deadline=self.deadline,
        )
        if isinstance(claim, JobRow):
            return End(row=claim)
        assert not isinstance(claim, BudgetRefusal), "a local run reserves no budget"
        if not claim.fresh:
            stored: CallRow = claim.call
            return stored
        self.owner.boundary("after_claim", self.job.id, step)
        return None

    async def claim_or_replay(
        self, step: str, name: str, request: dict[str, Any]
    ) -> CallRow | End | None:
        """``None`` when this delivery may run it now; else the answered run another delivery
        stored (replay it), or the run's end."""
        claimed = await self.claim_execution(step, name, request)
        if claimed is None or isinstance(claimed, End):
            return claimed
        return await self.settle_execution(step, name, claimed)

    async def settle_execution(self, step: str, name: str, call: CallRow) -> CallRow | End:
        """A run claimed by another delivery: its stored outcome, or an escalation."""
        got = await self.await_claim(step, call)
        if isinstance(got, End):
            return got
        self.receipts.append(stored_receipt(got))
        if got.status == "answered":
            self.log.info("handler.replayed", step=step, handler=name)
            return got
        if got.status == "failed":
            error = stored_outcome(got, error_from_outcome)
            detail = (
                f"{name} raised {error}"
                if error is not None
                else f"{name} raised {got.error_code}; {unreadable(got)}"
            )
            return End(self.escalate("handler_failed", detail, step=step))
        detail = (
            f"{step}: {name} started and never recorded an outcome; it may have had its "
            "effect, so it is never run again"
        )
        return End(self.escalate("handler_interrupted", detail, step=step))

    async def execute(
        self, step: str, name: str, option: FunctionOption, kwargs: dict[str, Any]
    ) -> tuple[Any, Receipt] | tuple[BaseException, Receipt]:
        started_at = now()
        t0 = time.monotonic()
        failure: BaseException | None = None
        value: Any = None
        try:
            # In its own thread, under the call's lease, BaseException contained.
            value = json_output(
                await self.delivery.run_local(
                    option.func,
                    self.with_runtime(option, kwargs, step),
                    job_id=self.job.id,
                    step=step,
                    name=name,
                )
            )
        except LedgerUnavailable:
            raise  # not run; the chunk is retried once the ledger is back
        except Exception as exc:
            failure = exc
            self.log.warning("handler.failed", step=step, handler=name, error=type(exc).__name__)
        receipt = Receipt(
            step=step,
            provider=HANDLER_PROVIDER,
            model=name,
            status="failed" if failure is not None else "answered",
            started_at=started_at,
            finished_at=now(),
            latency_ms=round((time.monotonic() - t0) * 1000, 3),
            error_code="handler_error" if failure is not None else None,
        )
        return (failure, receipt) if failure is not None else (value, receipt)

    async def tool_call(self, action: ToolStep) -> str | End:
        step, tool = action.step, action.tool
        name = tool.handler or tool.name
        args = {k: v for k, v in action.kwargs.items() if k not in tool.injected_names}
        request = {"tool": name, "args": args, "call_id": action.call.id}
        replayed = await self.claim_or_replay(step, name, request)
        if isinstance(replayed, End):
            return replayed
        if replayed is not None:
            content = stored_outcome(replayed, tool_result_from_outcome)
            if content is None:
                # Not fed to the model in place of the result it saw: the run stops here.
                detail = unreadable(replayed)
                return End(self.escalate("decision_interrupted", detail, step=step))
            return content
        result, receipt = await self.execute(step, name, tool, action.kwargs)
        receipt = receipt.model_copy(update={"request_sha256": digest_of(request)})
        self.owner.boundary("after_response", self.job.id, step)
        base = {"tool": name, "turn": self.turn, "call_id": action.call.id, "args": args}
        if receipt.status == "failed":
            assert isinstance(result, BaseException)
            error = error_text(result)
            self.receipts.append(receipt)
            outcome = outcome_of(
                "failed", receipt, json.dumps({**base, "error": error, "head": error}),
                "handler_error",
            )
            message = self.escalate("handler_failed", f"tool {name} raised {error}", step=step)
            return End(message, outcome, step=step)
        content = tool_content(result)
        stored = {**base, "content": content, "head": head_of(content)}
        outcome = outcome_of("answered", receipt, json.dumps(stored, ensure_ascii=False), None)
        try:
            await self.delivery.record(self.job.id, outcome)
        except ClaimLost as lost:
            settled = await self.settle_execution(step, name, lost.call)
            return settled if isinstance(settled, End) else content
        self.owner.boundary("after_record", self.job.id, step)
        self.receipts.append(receipt)
        return content

    async def resolve(self, pick: Pick) -> End:
        option = pick.option
        if not isinstance(option, FunctionOption):
            value = jsonable(Decided(pick, 1).resolve())
            return End(menu_result(self.job, value, list(self.receipts)))
        step, name = HANDLER_STEP, option.handler or option.name
        request = {"handler": name, "option": option.name, "args": pick.args}
        replayed = await self.claim_or_replay(step, name, request)
        if isinstance(replayed, End):
            return replayed
        if replayed is not None:
            stored = stored_outcome(replayed, handler_outcome)
            if stored is None:
                detail = unreadable(replayed)
                return End(self.escalate("decision_interrupted", detail, step=step))
            return End(menu_result(self.job, stored["value"], list(self.receipts)))
        result, receipt = await self.execute(step, name, option, pick.kwargs)
        receipt = receipt.model_copy(update={"request_sha256": digest_of(request)})
        self.owner.boundary("after_response", self.job.id, step)
        self.receipts.append(receipt)
        if receipt.status == "failed":
            assert isinstance(result, BaseException)
            error = error_text(result)
            stored = {**request, "error": error, "head": error}
            outcome = outcome_of("failed", receipt, json.dumps(stored), "handler_error")
            message = self.escalate(
                "handler_failed",
                f"{name} raised {error}",
                step=step,
                pick={"call": option.name, "args": pick.args, "step": self.turn},
            )
            return End(message, outcome, step=step)
        value = jsonable(result)
        stored = {**request, "value": value, "head": head_of(value)}
        outcome = outcome_of("answered", receipt, json.dumps(stored, ensure_ascii=False), None)
        return End(menu_result(self.job, value, list(self.receipts)), outcome, step=step)
