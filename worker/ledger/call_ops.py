"""The call state machine, as conditional SQL on one connection (the caller's transaction).

::

    (none) ──claim──▶ claimed ──record──▶ answered | failed | unknown   (terminal)
                        │  └─────record──▶ not_sent ──claim──▶ claimed  (claims + 1)
                        └──lease over, expire──▶ unknown

Every transition is an UPDATE whose WHERE names the state it leaves, so the database, not
a read-then-write in Python, decides who wins a race: no row returned means someone else
moved the row first. The functions take a connection so that a batch variant
(``claim_many``) is a loop inside one transaction.

The statements are built once, with bind parameters: building one per call cost more than
running it (measured: 0.23 ms against 0.05 ms on SQLite).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, bindparam, exc, func, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from shared.errors import LedgerError
from worker.ledger import budget_ops
from worker.ledger.errors import (
    CallNotFound,
    ClaimLost,
    JobFinished,
    JobNotFound,
    PlannedOtherwise,
)
from worker.ledger.leases import claim_reach
from worker.ledger.models import calls, jobs, to_utc
from worker.ledger.rows import OUTCOME_STATUSES, BudgetAsk, CallOutcome, CallRow, Claim, JobRow
from worker.ledger.sql import insert_if_absent, insert_many_if_absent

__all__ = [
    "call_row",
    "claim_call",
    "claim_new_calls",
    "expire_call",
    "list_calls",
    "read_call",
    "record_call",
    "record_calls",
    "validate_outcome",
]

_COST_BASES = frozenset({"reported", "estimate"})

# Bind names are prefixed: plain column names are reserved for the SET clause.
_KEY = (calls.c.job_id == bindparam("k_job")) & (calls.c.step == bindparam("k_step"))

_READ = select(calls).where(_KEY)

# The claim's job, read with a share lock: a claim waits for a finish of its job under way
# (which locks the row for update) and then sees it, so a job that stored its terminal
# message is never claimed again (PostgreSQL; SQLite's IMMEDIATE writers are serial anyway).
_JOB_FOR_SHARE = (
    select(jobs).where(jobs.c.job_id == bindparam("k_job")).with_for_update(read=True)
)
# A claim that names its delivery's plan locks the job's row for update instead: two
# deliveries planned otherwise then claim one after the other, and the second sees the
# first's call (``_planned_otherwise``). Only judgment jobs name a plan; their steps go
# one after another anyway.
_JOB_FOR_UPDATE = select(jobs).where(jobs.c.job_id == bindparam("k_job")).with_for_update()
_JOB_CALLS = select(calls.c.step, calls.c.request_sha256).where(
    calls.c.job_id == bindparam("k_job")
)

_RECLAIM = (
    update(calls)
    .where(_KEY & (calls.c.status == "not_sent"))
    .values(
        status="claimed",
        claims=calls.c.claims + 1,
        provider=bindparam("v_provider"),
        model=bindparam("v_model"),
        request_sha256=bindparam("v_sha"),
        pack_id=bindparam("v_pack"),
        lease_expires=bindparam("v_lease"),
        lease_reach_s=bindparam("v_reach"),
        claimed_at=bindparam("v_now"),
        reserved_usd=bindparam("v_reserved"),
        budget_scopes=bindparam("v_scopes"),
        # The new attempt starts clean; the old one's outcome is not its outcome.
        finished_at=None,
        cost_usd=None,
        cost_basis=None,
        error_code=None,
        receipt_json=None,
        outcome_json=None,
    )
    .returning(calls)
)

# Only onto the claim the outcome belongs to: still ``claimed``, and (when the outcome names
# it) by the same claim, not a later re-claim of a ``not_sent`` call.
_OWN_CLAIM = (calls.c.status == "claimed") & (
    func.coalesce(bindparam("v_claims", type_=Integer), calls.c.claims) == calls.c.claims
)
_RECORD_ONLY = (
    update(calls)
    .where(_KEY & _OWN_CLAIM)
    .values(
        status=bindparam("v_status"),
        finished_at=bindparam("v_now"),
        cost_usd=bindparam("v_cost"),
        cost_basis=bindparam("v_basis"),
        error_code=bindparam("v_error"),
        receipt_json=bindparam("v_receipt"),
        outcome_json=bindparam("v_outcome"),
    )
)
_RECORD = _RECORD_ONLY.returning(calls)

_EXPIRE = (
    update(calls)
    .where(_KEY & (calls.c.status == "claimed") & (calls.c.lease_expires < bindparam("v_now")))
    .values(
        status="unknown",
        finished_at=bindparam("v_now"),
        error_code="lease_expired",
        cost_usd=bindparam("v_cost"),
        cost_basis=bindparam("v_basis"),
    )
)


def call_row(row: Row[Any]) -> CallRow:
    return CallRow(**row._mapping)


def read_call(conn: Connection, job_id: str, step: str) -> CallRow | None:
    row = conn.execute(_READ, {"k_job": job_id, "k_step": step}).first()
    return None if row is None else call_row(row)


def list_calls(conn: Connection, where: ColumnElement[bool], *order: Any) -> list[CallRow]:
    return [call_row(r) for r in conn.execute(select(calls).where(where).order_by(*order))]


def _claim_values(fields: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A first claim's row: ``claim_call``'s arguments (``pack_id`` optional)."""
    return {
        "job_id": fields["job_id"],
        "step": fields["step"],
        "provider": fields["provider"],
        "model": fields["model"],
        "request_sha256": fields["request_sha256"],
        "pack_id": fields.get("pack_id"),
        "status": "claimed",
        "lease_expires": to_utc(fields["lease_expires"]),
        "lease_reach_s": claim_reach(to_utc(fields["lease_expires"]), now),
        "claims": 1,
        "claimed_at": now,
        "reserved_usd": fields.get("reserved_usd"),
        "budget_scopes": fields.get("budget_scopes"),
    }


def claim_new_calls(
    conn: Connection, *, claims: list[dict[str, Any]], now: datetime
) -> dict[str, Claim]:
    """First claims of calls of jobs just opened (none can exist yet), in one statement;
    by job id. A claim that did not insert means the ledger is not what the caller
    believes: ``LedgerError``, and the caller's transaction must not stand."""
    rows = insert_many_if_absent(conn, calls, [_claim_values(c, now) for c in claims])
    claimed = {row.job_id: Claim(fresh=True, call=call_row(row)) for row in rows}
    if len(claimed) != len(claims):
        raise LedgerError("a new job's call was claimed already")
    return claimed


def claim_call(
    conn: Connection,
    *,
    job_id: str,
    step: str,
    provider: str,
    model: str | None,
    request_sha256: str | None,
    lease_expires: datetime,
    now: datetime,
    pack_id: str | None = None,
    job_checked: bool = False,
    budget: BudgetAsk | None = None,
    plan: Mapping[str, str | None] | None = None,
) -> Claim:
    """Claim (job_id, step): insert it, or re-claim it if ``not_sent``; else the stored row.

    ``JobFinished`` (nothing claimed) if the job has stored its terminal message: a request
    sent then would be paid for and its answer thrown away. ``job_checked``: the caller
    opened the job in this transaction (so it is not finished). With ``budget``, a fresh
    claim reserves the request's worst case against every budget covering it, in this same
    transaction; ``OverBudget`` (nothing claimed, nothing reserved) if one cannot take it.
    With ``plan`` (every step its delivery plans, by request digest), a claim that would be
    fresh is refused (``PlannedOtherwise``, nothing claimed) when the job holds a call the
    plan does not make: an earlier delivery packed the items otherwise, and a step of this
    plan may carry items of a request whose outcome is unknown (found by an attack: two
    deliveries of a sift packed otherwise, one's first step refused by its budget, sent
    items twice; checked before each claim, outside its transaction, it still could)."""
    if not job_checked:
        locked = _JOB_FOR_SHARE if plan is None else _JOB_FOR_UPDATE
        job = conn.execute(locked, {"k_job": job_id}).first()
        if job is None:
            raise JobNotFound(job_id)
        if job.terminal_message is not None:
            raise JobFinished(JobRow(**job._mapping))
    if plan is not None:
        stored = read_call(conn, job_id, step)
        if stored is not None and stored.status != "not_sent":
            return Claim(fresh=False, call=stored)  # settles as it stands
        _planned_otherwise(conn, job_id, plan)
    lease = to_utc(lease_expires)
    reservation: budget_ops.Reservation | None = None
    if budget is not None and budget_ops.applies(conn, budget):
        if not job_checked and plan is None:  # a claim naming a plan read it above
            # Only a claim that can be fresh reserves: a stored call settles as it stands.
            stored = read_call(conn, job_id, step)
            if stored is not None and stored.status != "not_sent":
                return Claim(fresh=False, call=stored)
        reservation = budget_ops.reserve(conn, budget, provider=provider, now=now)
    fields = {
        "job_id": job_id,
        "step": step,
        "provider": provider,
        "model": model,
        "request_sha256": request_sha256,
        "pack_id": pack_id,
        "lease_expires": lease,
        "reserved_usd": None if reservation is None else reservation.amount,
        "budget_scopes": None if reservation is None else reservation.scopes_text,
    }
    try:
        inserted = insert_if_absent(conn, calls, _claim_values(fields, now))
    except exc.IntegrityError as error:
        # ON CONFLICT covers the key only; the foreign key to jobs still fails loudly.
        raise JobNotFound(job_id) from error
    if inserted is not None:
        return Claim(fresh=True, call=call_row(inserted))
    # Only a call that provably never reached the provider may be sent again.
    reclaimed = conn.execute(
        _RECLAIM,
        {
            "k_job": job_id,
            "k_step": step,
            "v_provider": provider,
            "v_model": model,
            "v_sha": request_sha256,
            "v_pack": pack_id,
            "v_lease": lease,
            "v_reach": claim_reach(lease, now),
            "v_now": now,
            "v_reserved": fields["reserved_usd"],
            "v_scopes": fields["budget_scopes"],
        },
    ).first()
    if reclaimed is not None:
        return Claim(fresh=True, call=call_row(reclaimed))
    # Another delivery claimed it meanwhile: this claim reserved for nothing.
    budget_ops.release(conn, reservation, now)
    stored = read_call(conn, job_id, step)
    assert stored is not None  # the conflict that stopped the insert
    return Claim(fresh=False, call=stored)


def _planned_otherwise(conn: Connection, job_id: str, plan: Mapping[str, str | None]) -> None:
    for step, digest in conn.execute(_JOB_CALLS, {"k_job": job_id}):
        if step not in plan or plan[step] != digest:
            raise PlannedOtherwise(job_id, step)


def validate_outcome(outcome: CallOutcome) -> None:
    """Refuse outcomes the schema would store but the state machine has no place for."""
    if outcome.status not in OUTCOME_STATUSES:
        raise ValueError(
            f"a call ends as one of {sorted(OUTCOME_STATUSES)}, not {outcome.status!r}"
        )
    _check_cost(outcome.cost_usd, outcome.cost_basis)


def _check_cost(cost_usd: float | None, cost_basis: str | None) -> None:
    if cost_basis is not None and cost_basis not in _COST_BASES:
        raise ValueError(f"cost_basis is reported, estimate or None, not {cost_basis!r}")
    if cost_usd is not None and cost_usd < 0:
        raise ValueError(f"cost_usd must not be negative, got {cost_usd}")


def record_call(conn: Connection, *, job_id: str, outcome: CallOutcome, now: datetime) -> CallRow:
    """Close a claimed call. Raises ``ClaimLost`` (nothing written) if it is not claimed."""
    validate_outcome(outcome)
    changed = conn.execute(_RECORD, _record_params(job_id, outcome, now)).first()
    if changed is not None:
        row = call_row(changed)
        budget_ops.settle(conn, [row], now)
        return row
    stored = read_call(conn, job_id, outcome.step)
    if stored is None:
        raise CallNotFound(job_id, outcome.step)
    raise ClaimLost(stored, outcome.status)


def _record_params(job_id: str, outcome: CallOutcome, now: datetime) -> dict[str, Any]:
    return {
        "k_job": job_id,
        "k_step": outcome.step,
        "v_status": outcome.status,
        "v_now": now,
        "v_cost": outcome.cost_usd,
        "v_basis": outcome.cost_basis,
        "v_error": outcome.error_code,
        "v_receipt": outcome.receipt_json,
        "v_outcome": outcome.outcome_json,
        "v_claims": outcome.claims,
    }


def record_calls(
    conn: Connection, *, outcomes: list[tuple[str, CallOutcome]], now: datetime
) -> int:
    """Close claimed calls, (job id, outcome) each, in one executemany; how many it closed.

    Fewer than given means some call was not claimed (``record_call`` says which and why):
    the caller must not let its transaction stand."""
    for _, outcome in outcomes:
        validate_outcome(outcome)
    params = [_record_params(job_id, outcome, now) for job_id, outcome in outcomes]
    closed = int(conn.execute(_RECORD_ONLY, params).rowcount)
    _settle_recorded(conn, outcomes, now)
    return closed


_BUDGETED = select(calls).where(
    calls.c.job_id.in_(bindparam("k_jobs", expanding=True)) & calls.c.reserved_usd.is_not(None)
)


def _settle_recorded(
    conn: Connection, outcomes: list[tuple[str, CallOutcome]], now: datetime
) -> None:
    """Settle the budgets of the calls ``record_calls`` just closed (one SELECT, and only
    those that reserved something)."""
    keys = {(job_id, outcome.step) for job_id, outcome in outcomes}
    if not keys:
        return
    rows = conn.execute(_BUDGETED, {"k_jobs": sorted({job_id for job_id, _ in keys})})
    closed = [call_row(r) for r in rows if (r.job_id, r.step) in keys and r.status != "claimed"]
    budget_ops.settle(conn, closed, now)


def expire_call(
    conn: Connection,
    *,
    job_id: str,
    step: str,
    now: datetime,
    cost_usd: float | None,
    cost_basis: str | None,
) -> CallRow:
    """A claimed call whose lease ran out becomes ``unknown``; any other row is left alone.

    ``cost_usd`` is what the lost request is booked at. A packed call (``pack_id``) books
    its share of it: the request went out once for all its members, so each of their rows
    holds the request's cost over the number of members, and the request is booked once."""
    _check_cost(cost_usd, cost_basis)
    if cost_usd is not None:
        cost_usd = _share_of_pack(conn, job_id, step, cost_usd)
    expired = conn.execute(
        _EXPIRE,
        {"k_job": job_id, "k_step": step, "v_now": now, "v_cost": cost_usd, "v_basis": cost_basis},
    ).rowcount
    row = read_call(conn, job_id, step)
    if row is None:
        raise CallNotFound(job_id, step)
    if expired:
        budget_ops.settle(conn, [row], now)
    return row


_PACK_OF = select(calls.c.pack_id).where(_KEY)
_PACK_SIZE = select(func.count()).where(calls.c.pack_id == bindparam("k_pack"))
#: Shares are rounded as the packed path rounds them: far below a cent, never negative.
_SHARE_DIGITS = 12


def _share_of_pack(conn: Connection, job_id: str, step: str, cost_usd: float) -> float:
    pack_id = conn.execute(_PACK_OF, {"k_job": job_id, "k_step": step}).scalar()
    if pack_id is None:
        return cost_usd
    members = int(conn.execute(_PACK_SIZE, {"k_pack": pack_id}).scalar_one())
    return round(cost_usd / max(members, 1), _SHARE_DIGITS)
