"""One job's ledger calls, one step at a time: claim (committed) ─▶ send ─▶ record.

Each planned request is its own ledger call keyed ``(job id, step)``. A step is sent only by
the delivery whose claim is fresh; any other delivery replays what is stored (``answered``,
``failed``), waits out a live claim, or, for a claim whose lease ran out or an ``unknown``
row, reports the step interrupted: it is never sent again. So a job redelivered after a
crash between two of its requests sends none of those already claimed, and each of the
rest once.

A step due after the job's deadline is not sent (``late``), unless an earlier delivery left
an outcome for it, which counts.

A stored call whose request is not the one this delivery planned (its digest differs: the
worker's settings changed between deliveries, so the items were packed otherwise) is not
replayed as if it were: its answers could belong to other items. It counts as interrupted
(never sent again), so a person sees those items.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from shared.replies import Answer, EscalationReason, Receipt
from worker.faults import fault_point
from worker.judgments.plan import PlannedCall
from worker.ledger import CallRow, ClaimLost, JobRow
from worker.runner import Runner, _stored_receipt, stored_answers

__all__ = ["JobCalls", "StepResult"]

StepStatus = Literal["answered", "failed", "not_sent", "unknown", "late"]


@dataclass(frozen=True)
class StepResult:
    """What one step of a job came to, sent now or read back from the ledger."""

    step: str
    status: StepStatus
    receipt: Receipt | None
    answers: dict[str, Answer] | None = None
    #: Why the job escalates when the step brought no answers.
    reason: EscalationReason = "provider_error"
    detail: str = ""


class JobCalls:
    """The calls of one delivery of one job."""

    def __init__(self, runner: Runner, job_id: str, deadline: datetime) -> None:
        self.runner = runner
        self.ledger = runner.ledger
        self.job_id = job_id
        self.deadline = deadline
        self.lease = deadline + timedelta(seconds=runner.settings.lease_margin_s)

    async def call(self, planned: PlannedCall) -> StepResult | JobRow:
        """The step's result; or the job's row if another delivery finished the job meanwhile."""
        runner, step = self.runner, planned.step
        if datetime.now(UTC) >= self.deadline:
            earlier = await runner._db(self.ledger.get_call, job_id=self.job_id, step=step)
            if earlier is not None and earlier.status != "not_sent":
                return await self._settle(planned, earlier)
            return StepResult(
                step, "late", None, reason="deadline_exceeded",
                detail=f"{step} was due after the job's deadline; not sent",
            )
        claim = await runner._db(
            self.ledger.claim,
            job_id=self.job_id,
            step=step,
            provider=planned.provider.name,
            model=planned.prepared.model,
            request_sha256=planned.prepared.request_sha256,
            lease_expires=self.lease,
        )
        if not claim.fresh:
            return await self._settle(planned, claim.call)
        fault_point("after_claim", self.job_id)
        runner.observer.call_started(planned.provider.name)
        started = time.monotonic()
        sent = await runner.send_call(
            planned.provider, planned.prepared, self.deadline, step=step, job_id=self.job_id
        )
        outcome = sent.outcome()
        runner.observer.call_finished(
            planned.provider.name, sent.status, time.monotonic() - started,
            outcome.cost_usd, outcome.cost_basis,
        )
        fault_point("after_response", self.job_id)
        record = runner._db(self.ledger.record, job_id=self.job_id, outcome=outcome)
        try:
            # A cancel must not unwind past an unrecorded send: record it, then let it go on.
            await (asyncio.shield(record) if sent.cancelled else record)
        except ClaimLost as lost:
            # Our lease ran out mid-call and another delivery booked it: its verdict stands.
            if sent.cancelled:
                raise asyncio.CancelledError from None
            return await self._settle(planned, lost.call)
        if sent.cancelled:
            raise asyncio.CancelledError
        return StepResult(
            step, sent.status, sent.receipt, sent.answers, sent.reason, sent.detail
        )

    async def _settle(self, planned: PlannedCall, call: CallRow) -> StepResult | JobRow:
        step = planned.step
        settled = await self.runner.await_claim(self.job_id, step, call)
        if isinstance(settled, JobRow):
            return settled
        receipt = _stored_receipt(settled)
        if settled.request_sha256 != planned.prepared.request_sha256:
            return StepResult(
                step, "unknown", receipt, reason="decision_interrupted",
                detail=f"{step} was sent by an earlier delivery as another request "
                "(the worker's settings changed); it is never sent again",
            )
        answers = stored_answers(settled)
        if answers is not None:
            return StepResult(step, "answered", receipt, answers)
        if settled.status == "failed":
            return StepResult(
                step, "failed", receipt, detail=f"{step}: the provider failed: {settled.error_code}"
            )
        if settled.status == "not_sent":
            return StepResult(step, "not_sent", receipt, detail=f"{step} was not sent")
        return StepResult(
            step, "unknown", receipt, reason="decision_interrupted",
            detail=f"{step} was interrupted with the request possibly sent; "
            "it is never sent again",
        )
