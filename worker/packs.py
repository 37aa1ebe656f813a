"""Packed decide jobs: one request for several jobs about the same state, at most once each.

    each member prepared alone (a job its provider refuses is rejected alone) ─▶ open every
    member's row ─▶ split the live ones into requests (``shared.packs``) ─▶ per request:
    claim every member's call, all or none (committed) ─▶ send ─▶ every member's outcome
    and terminal message in one transaction ─▶ publish each

Each member keeps its own call row ``(job id, "decide")`` holding its own answers and its
share of the cost, marked with the request's ``pack_id``. So a member met alone later (a
redelivery without the others, a resubmission without ``pack``) takes the ordinary decide
path and finds an ordinary call: answered (its verdict replays), claimed (the live request
is waited for) or unknown (escalated ``decision_interrupted``, never sent again).

A member whose call is not free (another delivery claimed it) rolls the claim back for all:
it is settled from its stored call and the others are claimed again without it. Requests of
one message go one after another, as a sift job's do: a crash between two of them leaves the
first settled and the second unclaimed, so a redelivery repeats neither.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from shared.canonical import digest_of
from shared.errors import DecisionProviderError, JobConflict, JobInvalid
from shared.estimate import default_prices, unpacked_cost
from shared.jobs import DecideJob
from shared.judgments import pack_limits_for
from shared.packs import pack_requests, packed_qid, packed_questions
from shared.replies import Answer, PackShare
from worker.faults import fault_point
from worker.ledger import ClaimLost, JobRow, MemberClaim, MemberFinish
from worker.providers import DecisionRequest
from worker.providers.base import DecisionProvider
from worker.runner import DECIDE_STEP, Runner, SentCall, _lost_cost, _outcome, answers_json_of
from worker.verdicts import escalation, verdict

__all__ = ["PackRunner"]

log = structlog.get_logger("decisions.packs")

#: Cost shares are rounded as the estimate rounds sums: far below a cent, never negative.
_COST_DIGITS = 12


@dataclass(frozen=True)
class _Member:
    raw: Any
    job: DecideJob
    row: JobRow


class PackRunner:
    """Runs the packable jobs of one message, all of one ``shared.packs.pack_key``."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._prices = default_prices(runner.settings)

    async def run(self, members: Sequence[tuple[Any, DecideJob]]) -> list[str | BaseException]:
        """Each member's terminal message type (or the error that stopped it), in order."""
        runner = self.runner
        ended: dict[int, str | BaseException] = {}
        alone: dict[int, Any] = {}
        opened: list[tuple[int, Any, DecideJob]] = []
        for index, (raw, job) in enumerate(members):
            try:
                runner._prepare(job)
            except (JobInvalid, DecisionProviderError):
                alone[index] = raw  # the decide path rejects it, naming its field
                continue
            opened.append((index, raw, job))
        rows = await asyncio.gather(
            *(runner._open(job) for _, _, job in opened), return_exceptions=True
        )
        live: list[tuple[int, _Member]] = []
        now = datetime.now(UTC)
        for (index, raw, job), row in zip(opened, rows, strict=True):
            if isinstance(row, JobConflict):
                alone[index] = raw
            elif isinstance(row, BaseException):
                ended[index] = row
            elif row.terminal_message is not None:
                ended[index] = await runner._publish(row, job.reply_to)
            elif now >= row.deadline:
                alone[index] = raw  # late: the decide path decides what an earlier send left
            else:
                live.append((index, _Member(raw, job, row)))
        settled = await self._run_requests([m for _, m in live])
        for (index, member), result in zip(live, settled, strict=True):
            if result is None:
                alone[index] = member.raw
            else:
                ended[index] = result
        solo = await asyncio.gather(
            *(runner.run_one(raw) for raw in alone.values()), return_exceptions=True
        )
        ended.update(zip(alone, solo, strict=True))
        return [ended[i] for i in range(len(members))]

    async def _run_requests(
        self, members: list[_Member]
    ) -> list[str | BaseException | None]:
        """Per member, its terminal message type; None for one to be run alone."""
        if not members:
            return []
        provider = self.runner.providers.get(
            members[0].job.provider or self.runner.providers.default_name
        )
        questions = [_wire(m.job) for m in members]
        groups = pack_requests(members[0].job.state, questions, pack_limits_for(provider.name))
        results: list[str | BaseException | None] = [None] * len(members)
        for group in groups:
            if len(group) == 1:
                continue
            outcomes = await self._send_pack(provider, [members[i] for i in group])
            for i, outcome in zip(group, outcomes, strict=True):
                results[i] = outcome
        return results

    async def _send_pack(
        self, provider: DecisionProvider, members: list[_Member]
    ) -> list[str | BaseException | None]:
        runner = self.runner
        first = members[0].job
        pack_id = digest_of({"jobs": [m.job.id for m in members], "step": DECIDE_STEP})[:32]
        request = DecisionRequest(
            state=first.state,
            questions=packed_questions([_wire(m.job) for m in members]),
            model=first.model,
            call_key=f"pack:{pack_id}/{DECIDE_STEP}",
        )
        try:
            prepared = provider.prepare(request, step=DECIDE_STEP)
        except DecisionProviderError as exc:
            # Our limits let it through and the provider's own check did not: each job alone.
            log.warning("pack.refused", pack_id=pack_id, error=exc.code, jobs=len(members))
            return [None] * len(members)
        margin = timedelta(seconds=runner.settings.lease_margin_s)
        claim = await runner._db(
            runner.ledger.claim_pack,
            members=[MemberClaim(m.job.id, m.row.deadline + margin) for m in members],
            step=DECIDE_STEP,
            provider=provider.name,
            model=prepared.model,
            request_sha256=prepared.request_sha256,
            pack_id=pack_id,
        )
        if not claim.fresh:
            log.info("pack.taken", pack_id=pack_id, jobs=len(members), taken=len(claim.taken))
            lost_cost = _lost_cost(provider, prepared)
            taken = [m for m in members if m.job.id in claim.taken]
            free = [m for m in members if m.job.id not in claim.taken]
            settled = await asyncio.gather(
                *(
                    runner._settle_existing(m.job, claim.taken[m.job.id], lost_cost)
                    for m in taken
                ),
                return_exceptions=True,
            )
            again = await self._send_pack(provider, free) if len(free) > 1 else [None] * len(free)
            by_id: dict[str, str | BaseException | None] = {}
            by_id.update(zip([m.job.id for m in taken], settled, strict=True))
            by_id.update(zip([m.job.id for m in free], again, strict=True))
            return [by_id[m.job.id] for m in members]
        for m in members:
            fault_point("after_claim", m.job.id)
        deadline = min(m.row.deadline for m in members)
        runner.observer.call_started(provider.name)
        started = time.monotonic()
        sent = await runner.send_call(
            provider, prepared, deadline, step=DECIDE_STEP, job_id=f"pack:{pack_id}"
        )
        runner.observer.call_finished(
            provider.name,
            sent.status,
            time.monotonic() - started,
            sent.receipt.cost_usd,
            sent.receipt.cost_basis,
        )
        for m in members:
            fault_point("after_response", m.job.id)
        log.info(
            "pack.finished",
            pack_id=pack_id,
            jobs=len(members),
            outcome=sent.status,
            provider=provider.name,
        )
        finishes = [
            self._member_finish(m, position, members, sent, pack_id)
            for position, m in enumerate(members)
        ]
        write = runner._db(runner.ledger.finish_pack, members=finishes)
        # A cancel must not unwind past an unrecorded send: record it, then let it go on.
        rows = await (asyncio.shield(write) if sent.cancelled else write)
        for m in members:
            fault_point("after_record", m.job.id)
        if sent.cancelled:
            raise asyncio.CancelledError
        return list(
            await asyncio.gather(
                *(self._published(m, row) for m, row in zip(members, rows, strict=True)),
                return_exceptions=True,
            )
        )

    def _member_finish(
        self,
        member: _Member,
        position: int,
        members: list[_Member],
        sent: SentCall,
        pack_id: str,
    ) -> MemberFinish:
        job = member.job
        total = sum(len(m.job.questions) for m in members)
        share = len(job.questions) / total
        request_cost = sent.receipt.cost_usd
        cost = None if request_cost is None else round(request_cost * share, _COST_DIGITS)
        alone = unpacked_cost(job, self.runner.settings, self._prices)
        saved = None if alone is None or cost is None else round(alone - cost, _COST_DIGITS)
        own = {packed_qid(position, qid): qid for qid in job.questions}
        receipt = sent.receipt.model_copy(
            update={
                "cost_usd": cost,
                # The receipt speaks of this job's questions, by this job's ids.
                "confidence_source": {
                    own[pq]: source
                    for pq, source in sent.receipt.confidence_source.items()
                    if pq in own
                },
                "evidence": [
                    e.model_copy(update={"question": own.get(e.question or "", e.question)})
                    for e in sent.receipt.evidence
                    if e.scope == "call" or e.question in own
                ],
                "packed": PackShare(
                    pack_id=pack_id,
                    jobs=len(members),
                    questions=total,
                    share=share,
                    request_cost_usd=request_cost,
                    unpacked_cost_usd=alone,
                    saved_usd=saved,
                ),
            }
        )
        answers: dict[str, Answer] | None = None
        if sent.answers is not None:
            answers = {own[pq]: answer for pq, answer in sent.answers.items() if pq in own}
            message = verdict(job, answers, [receipt])
        else:
            message = escalation(job, sent.reason, sent.detail, [receipt])
        answers_json = None if answers is None else answers_json_of(answers)
        return MemberFinish(
            job_id=job.id,
            message_type=message.type,
            reason=getattr(message, "reason", None),
            message_json=message.to_json(),
            outcome=_outcome(sent.status, receipt, answers_json, sent.error_code),
        )

    async def _published(self, member: _Member, row: JobRow | ClaimLost) -> str:
        runner = self.runner
        if isinstance(row, ClaimLost):
            # Our lease ran out mid-call and the call was booked unknown: that verdict stands.
            log.warning("call.claim_lost", job_id=member.job.id, stored=row.call.status)
            return await runner._settle_existing(member.job, row.call)
        runner.observer.job_finished(
            "decide",
            member.job.provider or runner.providers.default_name,
            row.terminal_type or "-",
            row.terminal_reason,
        )
        return await runner._publish(row, member.job.reply_to)


def _wire(job: DecideJob) -> dict[str, dict[str, Any]]:
    return {qid: q.wire() for qid, q in job.questions.items()}

