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
(never sent again), so a person sees those items. And from there on this delivery claims
nothing new: the earlier delivery's requests held other items than this plan's steps do, so
a step of this plan with no row of its own may hold items an earlier request carried, with
an outcome nobody knows (found by an attack: 350 items sent in one request, its worker
killed, then redelivered after a deploy that packs 100 a request; the first step was
reported interrupted, the three after it claimed afresh and items 100 to 349 paid again).
Its remaining steps count as interrupted too, unless a row of their own settles them. Each
claim names the delivery's whole plan (every step, by request digest), and the ledger
refuses, in the claim's own transaction with the job's row locked, a fresh claim for a job
holding a call the plan does not make (``PlannedOtherwise``). An earlier delivery's rows need
not be a prefix of its steps (a step the budget refused has none: found by a second attack,
a sift whose first step was refused and whose second claimed, redelivered packed otherwise,
sent the second's items again in its first), and two deliveries may run at once (found by a
third attack: one read the job's calls before its first claim, the other claimed between).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

from shared.jobs import AnyJob
from shared.judgments.steps import StepResult
from worker.delivery import Delivery, lost_cost, stored_answers, stored_receipt, unreadable
from worker.kinds.judgments.plan import PlannedCall
from worker.ledger import BudgetRefusal, CallRow, ClaimLost, JobRow, PlannedOtherwise
from worker.process.faults import fault_point

__all__ = ["JobCalls"]


class JobCalls:
    """The calls of one delivery of one job."""

    def __init__(
        self,
        delivery: Delivery,
        job_id: str,
        deadline: datetime,
        plan: list[PlannedCall],
        job: AnyJob | None = None,
    ) -> None:
        self.delivery = delivery
        self.job_id = job_id
        self.deadline = deadline
        #: The job, whose batch's budget (and the fleet's daily ceilings) each step reserves
        #: against; None: no budget applies.
        self.job = job
        #: The first step an earlier delivery sent as another request (None: none met): past
        #: it, nothing is claimed afresh.
        self.planned_otherwise: str | None = None
        #: Every step this delivery plans, by request digest: each claim names them all, and
        #: the ledger refuses one for a job holding a call they do not make.
        self.plan = {p.step: p.prepared.request_sha256 for p in plan}

    async def call(self, planned: PlannedCall) -> StepResult | JobRow:
        """The step's result; or the job's row if another delivery finished the job meanwhile."""
        delivery, step = self.delivery, planned.step
        if delivery.is_late(self.deadline):
            earlier = await delivery.earlier_call(self.job_id, step)
            if earlier is not None:
                return await self._settle(planned, earlier)
            return StepResult(
                step, "late", None, reason="deadline_exceeded",
                detail=f"{step} was due after the job's deadline; not sent",
            )
        if self.planned_otherwise is not None:
            earlier = await delivery.earlier_call(self.job_id, step)
            if earlier is not None:
                return await self._settle(planned, earlier)
            return self._not_claimed(step)
        claim = await delivery.claim_in_plan(
            self.job_id,
            step,
            plan=self.plan,
            provider=planned.provider.name,
            model=planned.prepared.model,
            request_sha256=planned.prepared.request_sha256,
            deadline=self.deadline,
            budget=None
            if self.job is None
            else delivery.budget(self.job, planned.provider, planned.prepared),
        )
        if isinstance(claim, JobRow):
            return claim
        if isinstance(claim, PlannedOtherwise):
            self.planned_otherwise = self.planned_otherwise or claim.step
            return self._not_claimed(step)
        if isinstance(claim, BudgetRefusal):
            # Nothing claimed, nothing sent: the step did not fit the budget.
            return StepResult(
                step, "not_sent", None, reason="budget_exhausted", detail=claim.detail()
            )
        if not claim.fresh:
            return await self._settle(planned, claim.call)
        fault_point("after_claim", self.job_id)
        sent = await delivery.send(
            planned.provider, planned.prepared, self.deadline, step=step, job_id=self.job_id
        )
        outcome = replace(sent.outcome(), claims=claim.call.claims)  # onto this claim only
        fault_point("after_response", self.job_id)
        record = delivery.record(self.job_id, outcome)
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

    def _not_claimed(self, step: str) -> StepResult:
        return StepResult(
            step, "unknown", None, reason="decision_interrupted",
            detail=f"{step} was not sent: an earlier delivery stored {self.planned_otherwise}, "
            "which this one does not plan (the worker's settings changed), so its items may "
            "have gone in a request whose outcome is unknown",
        )

    async def _settle(self, planned: PlannedCall, call: CallRow) -> StepResult | JobRow:
        step = planned.step
        # A claim whose worker died is booked at the provider's rule, as a decide job's is.
        lost = lost_cost(planned.provider, planned.prepared)
        settled = await self.delivery.await_claim(self.job_id, step, call, lost)
        if isinstance(settled, JobRow):
            return settled
        receipt = stored_receipt(settled)
        if settled.request_sha256 != planned.prepared.request_sha256:
            self.planned_otherwise = self.planned_otherwise or step
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
        if settled.status == "answered":
            # Its stored answers cannot be read (a damaged row, logged): not known, as an
            # interrupted step's are; the detail names the call.
            return StepResult(
                step, "unknown", receipt, reason="decision_interrupted",
                detail=unreadable(settled),
            )  # fmt: skip
        return StepResult(
            step, "unknown", receipt, reason="decision_interrupted",
            detail=f"{step} was interrupted with the request possibly sent; "
            "it is never sent again",
        )
