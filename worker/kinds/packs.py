"""Packed decide jobs: one request for several jobs about the same state, at most once each.

    each member prepared alone (a job its provider refuses is rejected alone) ─▶ open every
    member's row ─▶ split the live ones by deadline (``deadline_bands``: a member's deadline
    is its own) and into requests (``shared.packs``) ─▶ per request:
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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from shared.canonical import digest_of
from shared.errors import DecisionProviderError, JobConflict, JobInvalid
from shared.estimate import unpacked_cost
from shared.jobs import DecideJob
from shared.judgments import pack_limits_for
from shared.packs import pack_requests, packed_qid, packed_questions
from shared.prices import default_prices
from shared.replies import Answer, PackShare
from shared.verdicts import escalation, verdict
from worker.delivery import (
    Delivery,
    SentCall,
    answers_json_of,
    budget_ask,
    lost_cost,
    outcome_of,
)
from worker.kinds.decide import DECIDE_STEP, DecideKind
from worker.ledger import ClaimLost, JobRow, MemberClaim, MemberFinish
from worker.process.faults import fault_point
from worker.providers import DecisionRequest
from worker.providers.base import DecisionProvider

__all__ = ["DEADLINE_SPREAD", "PackRunner", "deadline_bands"]

log = structlog.get_logger("decisions.packs")

#: Cost shares are rounded as the estimate rounds sums: far below a cent, never negative.
_COST_DIGITS = 12
#: Members whose time left differs more than this factor are not packed together.
DEADLINE_SPREAD = 2.0
#: Time left counted for a member due now (so that a band of them is not empty).
_MIN_LEFT_S = 0.001


@dataclass(frozen=True)
class _Member:
    raw: Any
    job: DecideJob
    row: JobRow


class PackRunner:
    """Runs the packable jobs of one message, all of one ``shared.packs.pack_key``."""

    def __init__(self, delivery: Delivery, decide: DecideKind) -> None:
        self.delivery = delivery
        #: The decide kind: a member that cannot be packed runs alone on it.
        self.decide = decide
        self._prices = default_prices(delivery.settings)

    async def run(self, members: Sequence[tuple[Any, DecideJob]]) -> list[str | BaseException]:
        """Each member's terminal message type (or the error that stopped it), in order."""
        delivery = self.delivery
        ended: dict[int, str | BaseException] = {}
        alone: dict[int, Any] = {}
        opened: list[tuple[int, Any, DecideJob]] = []
        for index, (raw, job) in enumerate(members):
            try:
                self.decide.prepare(job)
            except (JobInvalid, DecisionProviderError):
                alone[index] = raw  # the decide path rejects it, naming its field
                continue
            opened.append((index, raw, job))
        rows = await asyncio.gather(
            *(delivery.ledger.open_job(job=delivery.open_args(job)) for _, _, job in opened),
            return_exceptions=True,
        )
        live: list[tuple[int, _Member]] = []
        now = delivery.now()
        for (index, raw, job), row in zip(opened, rows, strict=True):
            if isinstance(row, JobConflict):
                alone[index] = raw
            elif isinstance(row, BaseException):
                ended[index] = row
            elif row.finished:
                ended[index] = await delivery.replay(row, job)
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
            *(self.decide.run(raw) for raw in alone.values()), return_exceptions=True
        )
        ended.update(zip(alone, solo, strict=True))
        return [ended[i] for i in range(len(members))]

    async def _run_requests(
        self, members: list[_Member]
    ) -> list[str | BaseException | None]:
        """Per member, its terminal message type; None for one to be run alone."""
        if not members:
            return []
        provider = self.delivery.providers.get(
            self.delivery.provider_name(members[0].job.provider)
        )
        limits = pack_limits_for(provider.name)
        results: list[str | BaseException | None] = [None] * len(members)
        for band in deadline_bands([m.row.deadline for m in members], self.delivery.now()):
            questions = [_wire(members[i].job) for i in band]
            for group in pack_requests(members[0].job.state, questions, limits):
                if len(group) == 1:
                    continue
                chosen = [band[k] for k in group]
                outcomes = await self._send_pack(provider, [members[i] for i in chosen])
                for i, outcome in zip(chosen, outcomes, strict=True):
                    results[i] = outcome
        return results

    async def _send_pack(
        self, provider: DecisionProvider, members: list[_Member]
    ) -> list[str | BaseException | None]:
        delivery = self.delivery
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
        # The request's worst case, reserved for all members at once (each its share by
        # questions, as its cost is shared), in the one transaction that claims them all.
        worst = delivery.providers.worst_cost(provider, prepared)
        total = sum(len(m.job.questions) for m in members)
        claims = []
        for m in members:
            share = None if worst is None else worst * len(m.job.questions) / total
            ask = budget_ask(delivery.settings, m.job, provider.name, share)
            claims.append(MemberClaim(m.job.id, delivery.lease(m.row.deadline), ask))
        claim = await delivery.ledger.claim_pack(
            members=claims,
            step=DECIDE_STEP,
            provider=provider.name,
            model=prepared.model,
            request_sha256=prepared.request_sha256,
            pack_id=pack_id,
        )
        if claim.refused is not None:
            # Nothing was claimed: each member goes alone, and reserves (or escalates
            # budget_exhausted) on its own.
            log.info("pack.over_budget", pack_id=pack_id, jobs=len(members))
            return [None] * len(members)
        if not claim.fresh:
            log.info("pack.taken", pack_id=pack_id, jobs=len(members), taken=len(claim.taken))
            lost = lost_cost(provider, prepared)
            taken = [m for m in members if m.job.id in claim.taken]
            done = [m for m in members if m.job.id in claim.finished]
            free = [m for m in members if m.job.id not in claim.taken | claim.finished]
            settled = await asyncio.gather(
                *(self.decide.settle(m.job, claim.taken[m.job.id], lost) for m in taken),
                *(delivery.replay(claim.finished[m.job.id], m.job) for m in done),
                return_exceptions=True,
            )
            again = await self._send_pack(provider, free) if len(free) > 1 else [None] * len(free)
            by_id: dict[str, str | BaseException | None] = {}
            by_id.update(zip([m.job.id for m in taken + done], settled, strict=True))
            by_id.update(zip([m.job.id for m in free], again, strict=True))
            return [by_id[m.job.id] for m in members]
        for m in members:
            fault_point("after_claim", m.job.id)
        deadline = min(m.row.deadline for m in members)
        # Before the send: nothing may be awaited between a send and its record.
        for m in members:
            await delivery.thresholds.prefetch(m.job, provider.name, prepared.model)
        sent = await delivery.send(
            provider, prepared, deadline, step=DECIDE_STEP, job_id=f"pack:{pack_id}"
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
        # The answer may have been paid for: held through a ledger outage.
        write = delivery.hold_through_outage(
            lambda: delivery.ledger.finish_pack(members=finishes), f"finish pack {pack_id}"
        )
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
        alone = unpacked_cost(job, self.delivery.settings, self._prices)
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
            message = verdict(job, answers, [receipt], self.delivery.thresholds)
        else:
            message = escalation(job, sent.reason, sent.detail, [receipt])
        answers_json = None if answers is None else answers_json_of(answers)
        return MemberFinish(
            job_id=job.id,
            message_type=message.type,
            reason=getattr(message, "reason", None),
            message_json=message.to_json(),
            outcome=outcome_of(sent.status, receipt, answers_json, sent.error_code),
        )

    async def _published(self, member: _Member, row: JobRow | ClaimLost) -> str:
        delivery = self.delivery
        if isinstance(row, ClaimLost):
            # Our lease ran out mid-call and the call was booked unknown: that verdict stands.
            log.warning("call.claim_lost", job_id=member.job.id, stored=row.call.status)
            return await self.decide.settle(member.job, row.call)
        delivery.observer.job_finished(
            "decide",
            delivery.provider_name(member.job.provider),
            row.terminal_type or "-",
            row.terminal_reason,
        )
        return await delivery.publish(row, member.job.reply_to)


def deadline_bands(deadlines: Sequence[datetime], now: datetime) -> list[list[int]]:
    """Indexes of members whose deadlines may share a request, each band in input order.

    A packed request runs under its tightest member's deadline. So that one member's short
    deadline never cuts the others' requests short, a band takes members by deadline while
    each one's time left is at most ``DEADLINE_SPREAD`` times the band's shortest; a member
    alone in its band is sent alone, under its own deadline."""
    order = sorted(range(len(deadlines)), key=lambda i: deadlines[i])
    bands: list[list[int]] = []
    shortest = 0.0
    for index in order:
        left = max((deadlines[index] - now).total_seconds(), _MIN_LEFT_S)
        if not bands or left > shortest * DEADLINE_SPREAD:
            bands.append([])
            shortest = left
        bands[-1].append(index)
    return [sorted(band) for band in bands]


def _wire(job: DecideJob) -> dict[str, dict[str, Any]]:
    return {qid: q.wire() for qid, q in job.questions.items()}

