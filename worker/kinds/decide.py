"""The decide kind: one question set, one provider call, one verdict.

    validate and prepare the request (rejected if not) ─▶ open the job and claim its call
    (one committed write for a new job) ─▶ send ─▶ the verdict, stored with the call's
    outcome ─▶ publish once

Every step is the delivery protocol's (``worker.delivery``); this module only plans the
request and builds the message. A delivery that finds the job finished re-publishes the
stored message; one that finds the call claimed, answered, failed or unknown never sends:
it replays, waits for the live duplicate's lease, or escalates ``decision_interrupted``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import structlog

from shared.errors import DecisionProviderError, FieldProblem, JobConflict, JobInvalid
from shared.jobs import AnyJob, DecideJob
from shared.replies import TerminalMessage
from shared.verdicts import ThresholdSource, escalation, verdict
from worker.delivery import (
    Delivery,
    LostCost,
    SentCall,
    exhausted_context,
    lost_cost,
    no_maximum,
    stored_answers,
    stored_receipt,
    unreadable,
)
from worker.ledger import BudgetRefusal, CallOutcome, CallRow, ClaimLost, JobRow
from worker.process.faults import fault_point
from worker.providers import DecisionRequest, ProviderRegistry
from worker.providers.base import DecisionProvider, PreparedRequest

__all__ = ["DECIDE_STEP", "DecideKind", "Prepared", "decide_request", "prepare_decide"]

log = structlog.get_logger("decisions.decide")

DECIDE_STEP = "decide"
Prepared = tuple[DecisionProvider, PreparedRequest]


def decide_request(job: DecideJob) -> DecisionRequest:
    """A plain decide job's one request, images included (as ``assets``)."""
    return DecisionRequest(
        state=job.state,
        questions={qid: q.wire() for qid, q in job.questions.items()},
        model=job.model,
        call_key=f"{job.id}/{DECIDE_STEP}",
        # The provider checks where each image's token stands for the model (and the
        # catalog, at send time, before the paid request): worker.providers.images.
        assets=None if job.images is None else {k: i.data() for k, i in job.images.items()},
    )


def prepare_decide(job: AnyJob, providers: ProviderRegistry) -> Prepared:
    """A decide job's one request, prepared as the worker sends it (the provider's limits,
    its models, its images, the body); ``JobInvalid`` naming the field if it cannot be. The
    dry run (``worker.kinds.menus.submit.job_checker``) calls this too, so it refuses what the
    worker would.
    """
    if not isinstance(job, DecideJob):
        raise JobInvalid([FieldProblem("kind", "this worker runs no menu jobs")], job.id)
    problems = providers.check(job.provider, job.model)
    if problems:
        raise JobInvalid(problems, job.id)
    provider = providers.get(job.provider or providers.default_name)
    try:
        prepared = provider.prepare(decide_request(job), step=DECIDE_STEP)
    except DecisionProviderError as exc:
        if exc.code in ("invalid_request", "configuration"):
            raise JobInvalid([exc.problem(exc.field or "questions")], job.id) from None
        raise
    # A job carrying a budget for a provider with no known maximum could never be sent.
    problem = no_maximum(job, provider.name, providers.worst_cost(provider, prepared))
    if problem is not None:
        raise JobInvalid([problem], job.id)
    return provider, prepared


class DecideKind:
    """Runs plain decide jobs (not verified, not packed) on a ``Delivery``."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery

    def prepare(self, job: AnyJob) -> Prepared:
        """The job's one request, prepared; ``JobInvalid`` naming the field if it cannot be."""
        return prepare_decide(job, self.delivery.providers)

    async def run(self, raw: Any) -> str:
        """Run one decide job; returns the type of its terminal message."""
        delivery = self.delivery
        checked = await delivery.validate(raw, self.prepare)
        if isinstance(checked, str):
            return checked
        job, (provider, prepared) = checked
        assert isinstance(job, DecideJob)
        deadline = delivery.deadline(job)
        budget = delivery.budget(job, provider, prepared)
        claim_args = {
            "step": DECIDE_STEP,
            "provider": provider.name,
            "model": prepared.model,
            "request_sha256": prepared.request_sha256,
            "lease_expires": delivery.lease(deadline),
            "budget": budget,
        }
        try:
            # A new job is opened and claimed in one write; a redelivery only reads its row.
            row, claim = await delivery.ledger.open_and_claim(
                job=delivery.open_args(job, deadline), claim=claim_args
            )
        except JobConflict as exc:
            return await delivery.outbox.reject(raw, [FieldProblem("id", str(exc))])
        lost = lost_cost(provider, prepared)
        if isinstance(claim, BudgetRefusal):
            return await self.exhausted(job, claim)
        if claim is None:
            if row.finished:
                return await delivery.replay(row, job)
            if delivery.is_late(row.deadline):
                # Late, but an earlier delivery may have sent the call: that one's fate decides.
                earlier = await delivery.earlier_call(job.id, DECIDE_STEP)
                if earlier is not None:
                    return await self.settle(job, earlier, lost)
                late = escalation(
                    job, "deadline_exceeded", "dequeued after its deadline; nothing sent", []
                )
                return await self.finish(job, late, None)
            # The stored row's deadline counts, not the one this delivery computed.
            claimed = await delivery.claim(
                job.id,
                DECIDE_STEP,
                provider=provider.name,
                model=prepared.model,
                request_sha256=prepared.request_sha256,
                deadline=row.deadline,
                budget=budget,
            )
            if isinstance(claimed, JobRow):
                return await delivery.replay(claimed, job)
            if isinstance(claimed, BudgetRefusal):
                return await self.exhausted(job, claimed)
            claim = claimed
        if not claim.fresh:
            return await self.settle(job, claim.call, lost)
        fault_point("after_claim", job.id)
        # Before the send: nothing may be awaited between a send and its record.
        await delivery.thresholds.prefetch(job, provider.name, prepared.model)
        sent = await delivery.send(
            provider, prepared, row.deadline, step=DECIDE_STEP, job_id=job.id
        )
        fault_point("after_response", job.id)
        message = self.message(job, sent, delivery.thresholds)
        log.info(
            "call.finished",
            job_id=job.id,
            batch=job.batch,
            step=DECIDE_STEP,
            provider=provider.name,
            outcome=sent.status,
            reason=getattr(message, "reason", None),
        )
        # Recorded only onto this delivery's own claim.
        outcome = replace(sent.outcome(), claims=claim.call.claims)
        if sent.cancelled:
            # Record what the cancel left behind before letting the cancel unwind the task.
            await asyncio.shield(self.finish(job, message, outcome))
            raise asyncio.CancelledError
        return await self.finish(job, message, outcome)

    async def exhausted(self, job: DecideJob, refusal: BudgetRefusal) -> str:
        """A budget could not take the request: nothing was claimed or sent; the job
        escalates ``budget_exhausted`` with the figures (``decisions budget resume`` reruns
        it once the budget is raised)."""
        message = escalation(job, "budget_exhausted", refusal.detail(), [])
        message = message.model_copy(
            update={"context": {**message.context, **exhausted_context(refusal)}}
        )
        return await self.finish(job, message, None)

    @staticmethod
    def message(
        job: DecideJob, sent: SentCall, thresholds: ThresholdSource | None = None
    ) -> TerminalMessage:
        if sent.answers is not None:
            return verdict(job, sent.answers, [sent.receipt], thresholds)
        return escalation(job, sent.reason, sent.detail, [sent.receipt])

    async def settle(self, job: DecideJob, call: CallRow, lost: LostCost = (None, None)) -> str:
        """Another delivery claimed this call: never send; replay, wait for it, or escalate."""
        settled = await self.delivery.await_claim(job.id, DECIDE_STEP, call, lost)
        if isinstance(settled, JobRow):
            return await self.delivery.publish(settled, job.reply_to)
        receipt = stored_receipt(settled)
        message: TerminalMessage
        answers = stored_answers(settled)
        if answers is not None:
            await self.delivery.thresholds.prefetch(job, receipt.provider, receipt.model)
            message = verdict(job, answers, [receipt], self.delivery.thresholds)
        elif settled.status == "failed":
            message = escalation(
                job, "provider_error", f"the provider failed: {settled.error_code}", [receipt]
            )
        elif settled.status == "answered":
            # Answered, but its stored answers cannot be read (a damaged row, logged): they
            # are not known, as an interrupted call's are; the detail names the call.
            message = escalation(job, "decision_interrupted", unreadable(settled), [receipt])
        else:
            message = escalation(
                job,
                "decision_interrupted",
                "a delivery was interrupted with the request possibly sent; it is never sent again",
                [receipt],
            )
        return await self.finish(job, message, None)

    async def finish(
        self, job: DecideJob, message: TerminalMessage, outcome: CallOutcome | None
    ) -> str:
        delivery = self.delivery
        try:
            row = await delivery.finish(
                job, message, outcome, provider=delivery.provider_name(job.provider)
            )
        except ClaimLost as lost:
            # Our lease ran out mid-call and another delivery booked the call unknown: its
            # verdict stands; settle from the stored row, never overwrite it.
            log.warning("call.claim_lost", job_id=job.id, stored=lost.call.status)
            return await self.settle(job, lost.call)
        return await delivery.publish(row, job.reply_to)
