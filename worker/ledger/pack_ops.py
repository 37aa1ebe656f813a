"""Packed calls: several jobs' ``decide`` calls claimed, and closed, as one.

When jobs are packed into one request (``worker.kinds.packs``), each member keeps its own call
row ``(job id, "decide")``, so every path that meets the job alone (a redelivery of one
member, the reaper, ``decisions ledger``) finds an ordinary call: claimed, answered with
that job's own answers, or unknown. What packing adds is all-or-nothing:

- ``claim_members``: every member's call is claimed in one transaction, or none is. A
  member whose call exists and cannot be claimed again (another delivery holds or settled
  it) rolls the whole claim back, so a request is never sent for a job that someone else
  may send or has sent.
- ``finish_members``: every member's outcome and terminal message in one transaction, so a
  crash cannot leave some members answered and the rest with an outcome the ledger forgot.

Members are claimed in job-id order: two workers claiming overlapping packs on PostgreSQL
then lock the rows in the same order and cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Connection

from worker.ledger import call_ops, job_ops
from worker.ledger.errors import ClaimLost, JobFinished, OverBudget
from worker.ledger.rows import BudgetAsk, BudgetRefusal, CallOutcome, CallRow, JobRow

__all__ = [
    "MemberClaim",
    "MemberFinish",
    "PackClaim",
    "claim_members",
    "finish_members",
]


@dataclass(frozen=True)
class MemberClaim:
    job_id: str
    lease_expires: datetime
    #: The member's share of the request's worst case, reserved with its claim: a pack
    #: reserves for all its members in its one transaction, or for none.
    budget: BudgetAsk | None = None


@dataclass(frozen=True)
class MemberFinish:
    job_id: str
    message_type: str
    reason: str | None
    message_json: str
    outcome: CallOutcome


@dataclass(frozen=True)
class PackClaim:
    """All members claimed (``fresh``), or none: ``taken`` says whose call was not free and
    ``finished`` which members' jobs were finished meanwhile (publish their message)."""

    fresh: bool
    taken: dict[str, CallRow]
    finished: dict[str, JobRow] = field(default_factory=dict)
    #: A budget could not take the request (nothing claimed): its members go alone.
    refused: BudgetRefusal | None = None


def claim_members(
    conn: Connection,
    *,
    members: Sequence[MemberClaim],
    step: str,
    provider: str,
    model: str | None,
    request_sha256: str,
    pack_id: str,
    now: datetime,
) -> tuple[dict[str, CallRow], dict[str, JobRow], BudgetRefusal | None]:
    """Claim every member's call on ``conn``: the stored calls of those that were not free,
    the rows of members whose job is finished, and a budget's refusal of a member's share.

    If any of them is not empty the caller must roll its transaction back: the claims (and
    reservations) made before are not meant to stand.
    """
    taken: dict[str, CallRow] = {}
    finished: dict[str, JobRow] = {}
    for member in sorted(members, key=lambda m: m.job_id):
        try:
            claim = call_ops.claim_call(
                conn,
                job_id=member.job_id,
                step=step,
                provider=provider,
                model=model,
                request_sha256=request_sha256,
                lease_expires=member.lease_expires,
                now=now,
                pack_id=pack_id,
                budget=member.budget,
            )
        except JobFinished as done:
            finished[member.job_id] = done.job
            continue
        except OverBudget as over:
            return taken, finished, over.refusal
        if not claim.fresh:
            taken[member.job_id] = claim.call
    return taken, finished, None


def finish_members(
    conn: Connection, *, members: Sequence[MemberFinish], now: datetime
) -> list[JobRow | ClaimLost]:
    """Each member's finished row; or its ``ClaimLost`` (nothing written for that member)."""
    ended: list[JobRow | ClaimLost] = []
    for member in members:
        try:
            ended.append(
                job_ops.finish_job(
                    conn,
                    job_id=member.job_id,
                    message_type=member.message_type,
                    reason=member.reason,
                    message_json=member.message_json,
                    outcome=member.outcome,
                    now=now,
                )
            )
        except ClaimLost as lost:
            # Refused before it wrote anything: the other members' writes stand.
            ended.append(lost)
    return ended
