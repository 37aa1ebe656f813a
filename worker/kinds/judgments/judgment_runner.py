"""Sift, route and verified decide jobs, each from its raw JSON to its one terminal message.

    validate and plan every request (pure; rejected if any cannot be sent) ─▶ open the job
    row ─▶ for each step: claim (committed) ─▶ send ─▶ record ─▶ the terminal message,
    stored once ─▶ publish once

Every step is the delivery protocol's (``worker.delivery``: validate, open, claim, await,
send, record, finish, publish); this module plans the requests and builds the message. Requests go
one after another: a job's steps are the same on every delivery, and one whose deadline
passes stops sending where it is.
"""

from __future__ import annotations

from typing import Any

import structlog

from shared.errors import FieldProblem, JobInvalid
from shared.jobs import AnyJob, DecideJob, RouteJob, SiftJob
from shared.judgments.route import route_message
from shared.judgments.sift import sift_message
from shared.judgments.steps import StepResult
from shared.judgments.verify import primary_message, verified_message
from shared.replies import ResultMessage, TerminalMessage
from worker.delivery import Delivery, no_maximum
from worker.kinds.judgments.calls import JobCalls
from worker.kinds.judgments.plan import (
    PlannedCall,
    VerifiedPlan,
    plan_route,
    plan_sift,
    plan_verified,
)
from worker.ledger import JobRow

__all__ = ["JudgmentRunner"]

log = structlog.get_logger("decisions.judgments")

Plan = list[PlannedCall] | PlannedCall | VerifiedPlan


class JudgmentRunner:
    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery

    def plan(self, job: AnyJob) -> Plan:
        """Every request the job will send, prepared; ``JobInvalid`` naming the field if not."""
        plan = self._plan(job)
        providers = self.delivery.providers
        for planned in _planned(plan):
            worst = providers.worst_cost(planned.provider, planned.prepared)
            problem = no_maximum(job, planned.provider.name, worst)
            if problem is not None:
                raise JobInvalid([problem], job.id)
        return plan

    def _plan(self, job: AnyJob) -> Plan:
        providers = self.delivery.providers
        if isinstance(job, SiftJob):
            return plan_sift(job, providers)
        if isinstance(job, RouteJob):
            return plan_route(job, providers)
        if isinstance(job, DecideJob) and job.verify is not None:
            return plan_verified(job, providers)
        raise JobInvalid([FieldProblem("kind", f"{job.kind!r} is not a judgment job")], job.id)

    async def run_one(self, raw: Any) -> str:
        """Run one judgment job; returns the type of its terminal message."""
        delivery = self.delivery
        checked = await delivery.validate(raw, self.plan)
        if isinstance(checked, str):
            return checked
        job, plan = checked
        row = await delivery.open(raw, job)
        if isinstance(row, str):
            return row
        calls = JobCalls(delivery, job.id, row.deadline, _planned(plan), job)
        ended = await self._run(job, plan, calls)
        if isinstance(ended, JobRow):
            return await delivery.publish(ended, job.reply_to)
        return await self._finish(job, ended)

    async def _run(self, job: AnyJob, plan: Plan, calls: JobCalls) -> TerminalMessage | JobRow:
        if isinstance(job, SiftJob) and isinstance(plan, list):
            results = await _each(calls, plan)
            if isinstance(results, JobRow):
                return results
            return sift_message(job, plan, results)
        if isinstance(job, RouteJob) and isinstance(plan, PlannedCall):
            result = await calls.call(plan)
            return result if isinstance(result, JobRow) else route_message(job, result)
        assert isinstance(job, DecideJob) and isinstance(plan, VerifiedPlan)
        book = self.delivery.thresholds
        # Before the send: nothing may be awaited between a send and its record.
        await book.prefetch(job, plan.primary.provider.name, plan.primary.prepared.model)
        first = await calls.call(plan.primary)
        if isinstance(first, JobRow):
            return first
        primary = primary_message(job, first, book)
        if not isinstance(primary, ResultMessage):
            return primary
        checks = await _each(calls, list(plan.verifiers))
        if isinstance(checks, JobRow):
            return checks
        return verified_message(job, primary, plan.verifiers, checks)

    async def _finish(self, job: AnyJob, message: TerminalMessage) -> str:
        delivery = self.delivery
        # Every call is recorded already: the message alone closes the job (first wins).
        provider = delivery.provider_name(getattr(job, "provider", None))
        row = await delivery.finish(job, message, None, provider=provider)
        log.info(
            "job.finished",
            job_id=job.id,
            kind=job.kind,
            outcome=message.type,
            reason=getattr(message, "reason", None),
        )
        return await delivery.publish(row, job.reply_to)


async def _each(calls: JobCalls, plan: list[PlannedCall]) -> list[StepResult] | JobRow:
    results = []
    for planned in plan:
        result = await calls.call(planned)
        if isinstance(result, JobRow):
            return result
        results.append(result)
    return results


def _planned(plan: Plan) -> list[PlannedCall]:
    if isinstance(plan, PlannedCall):
        return [plan]
    if isinstance(plan, VerifiedPlan):
        return [plan.primary, *plan.verifiers]
    return list(plan)
