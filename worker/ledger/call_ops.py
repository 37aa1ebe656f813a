"""The call state machine, as conditional SQL on one connection (the caller's transaction).

::

    (none) ──claim──▶ claimed ──record──▶ answered | failed | unknown   (terminal)
                        │  └─────record──▶ not_sent ──claim──▶ claimed  (claims + 1)
                        └──lease over, expire──▶ unknown

Every transition is an UPDATE whose WHERE names the state it leaves, so the database, not
a read-then-write in Python, decides who wins a race: a row count of 0 means someone else
moved the row first. The functions take a connection so that a batch variant
(``claim_many``) is a loop inside one transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import exc, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.elements import ColumnElement

from worker.ledger.errors import CallNotFound, ClaimLost, JobNotFound
from worker.ledger.models import calls, to_utc
from worker.ledger.rows import OUTCOME_STATUSES, CallOutcome, CallRow, Claim
from worker.ledger.sql import insert_if_absent

__all__ = [
    "call_row",
    "claim_call",
    "expire_call",
    "list_calls",
    "read_call",
    "record_call",
    "validate_outcome",
]

_COST_BASES = frozenset({"reported", "estimate"})


def call_row(row: Row[Any]) -> CallRow:
    return CallRow(**row._mapping)


def _key(job_id: str, step: str) -> ColumnElement[bool]:
    return (calls.c.job_id == job_id) & (calls.c.step == step)


def read_call(conn: Connection, job_id: str, step: str) -> CallRow | None:
    row = conn.execute(select(calls).where(_key(job_id, step))).first()
    return None if row is None else call_row(row)


def list_calls(conn: Connection, where: ColumnElement[bool], *order: Any) -> list[CallRow]:
    return [call_row(r) for r in conn.execute(select(calls).where(where).order_by(*order))]


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
) -> Claim:
    lease = to_utc(lease_expires)
    attempt = {
        "provider": provider,
        "model": model,
        "request_sha256": request_sha256,
        "status": "claimed",
        "lease_expires": lease,
        "claimed_at": now,
    }
    try:
        inserted = insert_if_absent(
            conn, calls, {"job_id": job_id, "step": step, "claims": 1, **attempt}
        )
    except exc.IntegrityError as error:
        # ON CONFLICT covers the key only; the foreign key to jobs still fails loudly.
        raise JobNotFound(job_id) from error
    if not inserted:
        # Only a call that provably never reached the provider may be sent again. The new
        # attempt replaces the old one's outcome fields; ``claims`` keeps the count.
        reclaimed = conn.execute(
            update(calls)
            .where(_key(job_id, step) & (calls.c.status == "not_sent"))
            .values(
                claims=calls.c.claims + 1,
                finished_at=None,
                cost_usd=None,
                cost_basis=None,
                error_code=None,
                receipt_json=None,
                outcome_json=None,
                **attempt,
            )
        ).rowcount
        inserted = reclaimed == 1
    row = read_call(conn, job_id, step)
    assert row is not None  # inserted, or the conflict that stopped the insert
    return Claim(fresh=inserted, call=row)


def validate_outcome(outcome: CallOutcome) -> None:
    """Refuse outcomes the schema would store but the state machine has no place for."""
    if outcome.status not in OUTCOME_STATUSES:
        raise ValueError(
            f"a call ends as one of {sorted(OUTCOME_STATUSES)}, not {outcome.status!r}"
        )
    if outcome.cost_basis is not None and outcome.cost_basis not in _COST_BASES:
        raise ValueError(f"cost_basis is reported, estimate or None, not {outcome.cost_basis!r}")
    if outcome.cost_usd is not None and outcome.cost_usd < 0:
        raise ValueError(f"cost_usd must not be negative, got {outcome.cost_usd}")


def record_call(conn: Connection, *, job_id: str, outcome: CallOutcome, now: datetime) -> CallRow:
    """Close a claimed call. Raises ``ClaimLost`` (nothing written) if it is not claimed."""
    validate_outcome(outcome)
    changed = conn.execute(
        update(calls)
        .where(_key(job_id, outcome.step) & (calls.c.status == "claimed"))
        .values(
            status=outcome.status,
            finished_at=now,
            cost_usd=outcome.cost_usd,
            cost_basis=outcome.cost_basis,
            error_code=outcome.error_code,
            receipt_json=outcome.receipt_json,
            outcome_json=outcome.outcome_json,
        )
    ).rowcount
    row = read_call(conn, job_id, outcome.step)
    if row is None:
        raise CallNotFound(job_id, outcome.step)
    if changed != 1:
        raise ClaimLost(row, outcome.status)
    return row


def expire_call(
    conn: Connection,
    *,
    job_id: str,
    step: str,
    now: datetime,
    cost_usd: float | None,
    cost_basis: str | None,
) -> CallRow:
    """A claimed call whose lease ran out becomes ``unknown``; any other row is left alone."""
    if cost_basis is not None and cost_basis not in _COST_BASES:
        raise ValueError(f"cost_basis is reported, estimate or None, not {cost_basis!r}")
    conn.execute(
        update(calls)
        .where(_key(job_id, step) & (calls.c.status == "claimed") & (calls.c.lease_expires < now))
        .values(
            status="unknown",
            finished_at=now,
            error_code="lease_expired",
            cost_usd=cost_usd,
            cost_basis=cost_basis,
        )
    )
    row = read_call(conn, job_id, step)
    if row is None:
        raise CallNotFound(job_id, step)
    return row
