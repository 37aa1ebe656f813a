"""Sift, route and verified decide jobs, each from its raw JSON to its one terminal message.

    validate and plan every request (pure; rejected if any cannot be sent) ─▶ open the job
    row ─▶ for each step: claim (committed) ─▶ send ─▶ record ─▶ the terminal message,
    stored once ─▶ publish once

It shares the decide path's ``Runner`` (ledger, providers, sink, stats, observer and its
helpers: ``send_call``, ``await_claim``, ``_open``, ``_publish``, ``_reject``). Requests go
one after another: a job's steps are the same on every delivery, and one whose deadline
passes stops sending where it is.
"""

from __future__ import annotations

from typing import Any

import structlog

from shared.errors import FieldProblem, JobConflict, JobInvalid
from shared.jobs import AnyJob, DecideJob, RouteJob, SiftJob, parse_job
from shared.replies import EscalationMessage, ResultMessage
from worker.faults import fault_point
from worker.judgments.calls import JobCalls, StepResult
from worker.judgments.plan import PlannedCall, VerifiedPlan, plan_route, plan_sift, plan_verified
from worker.judgments.route import route_message
from worker.judgments.sift import sift_message
from worker.judgments.verify import primary_message, verified_message
from worker.ledger import JobRow
from worker.runner import Runner

__all__ = ["JudgmentRunner"]

log = structlog.get_logger("decisions.judgments")

Message = ResultMessage | EscalationMessage
Plan = list[PlannedCall] | PlannedCall | VerifiedPlan


class JudgmentRunner:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def plan(self, job: AnyJob) -> Plan:
        """Every request the job will send, prepared; ``JobInvalid`` naming the field if not."""
        providers = self.runner.providers
        if isinstance(job, SiftJob):
            return plan_sift(job, providers)
        if isinstance(job, RouteJob):
            return plan_route(job, providers)
        if isinstance(job, DecideJob) and job.verify is not None:
            return plan_verified(job, providers)
        raise JobInvalid([FieldProblem("kind", f"{job.kind!r} is not a judgment job")], job.id)

    async def run_one(self, raw: Any) -> str:
        """Run one judgment job; returns the type of its terminal message."""
        runner = self.runner
        try:
            job = parse_job(raw)
            plan = self.plan(job)
        except JobInvalid as exc:
            return await runner._reject(raw, exc.problems)
        try:
            row = await runner._open(job)
        except JobConflict as exc:
            return await runner._reject(raw, [FieldProblem("id", str(exc))])
        if row.terminal_message is not None:
            log.info("job.replayed", job_id=job.id, kind=job.kind, outcome=row.terminal_type)
            return await runner._publish(row, job.reply_to)
        calls = JobCalls(runner, job.id, row.deadline)
        ended = await self._run(job, plan, calls)
        if isinstance(ended, JobRow):
            return await runner._publish(ended, job.reply_to)
        return await self._finish(job, ended)

    async def _run(self, job: AnyJob, plan: Plan, calls: JobCalls) -> Message | JobRow:
        if isinstance(job, SiftJob) and isinstance(plan, list):
            results = await _each(calls, plan)
            if isinstance(results, JobRow):
                return results
            return sift_message(job, plan, results)
        if isinstance(job, RouteJob) and isinstance(plan, PlannedCall):
            result = await calls.call(plan)
            return result if isinstance(result, JobRow) else route_message(job, result)
        assert isinstance(job, DecideJob) and isinstance(plan, VerifiedPlan)
        first = await calls.call(plan.primary)
        if isinstance(first, JobRow):
            return first
        primary = primary_message(job, first)
        if not isinstance(primary, ResultMessage):
            return primary
        checks = await _each(calls, list(plan.verifiers))
        if isinstance(checks, JobRow):
            return checks
        return verified_message(job, primary, plan.verifiers, checks)

    async def _finish(self, job: AnyJob, message: Message) -> str:
        runner = self.runner
        reason = getattr(message, "reason", None)
        # Every call is recorded already: the message alone closes the job (first wins).
        row = await runner._db(
            runner.ledger.finish_job,
            job_id=job.id,
            message_type=message.type,
            reason=reason,
            message_json=message.to_json(),
            outcome=None,
        )
        fault_point("after_record", job.id)
        provider = getattr(job, "provider", None) or runner.providers.default_name
        runner.observer.job_finished(job.kind, provider, message.type, reason)
        log.info("job.finished", job_id=job.id, kind=job.kind, outcome=message.type, reason=reason)
        return await runner._publish(row, job.reply_to)


async def _each(calls: JobCalls, plan: list[PlannedCall]) -> list[StepResult] | JobRow:
    results = []
    for planned in plan:
        result = await calls.call(planned)
        if isinstance(result, JobRow):
            return result
        results.append(result)
    return results
