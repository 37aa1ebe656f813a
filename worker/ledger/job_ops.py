"""Jobs and their outbox, as SQL on one connection (the caller's transaction).

A job row is opened once per logical job (insert-or-read on the producer's id) and closed
once: its terminal message is stored in the transaction that records its last call, and
published afterwards. Storing is first-wins, so every redelivery publishes the same bytes.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection, Row

from shared.errors import JobConflict, LedgerError
from shared.replies import TERMINAL_TYPES
from worker.ledger import budget_ops
from worker.ledger.call_ops import (
    claim_call,
    claim_new_calls,
    record_call,
    record_calls,
    validate_outcome,
)
from worker.ledger.errors import CallNotFound, ClaimLost, JobNotFound, OverBudget
from worker.ledger.models import jobs, to_utc
from worker.ledger.rows import BudgetRefusal, CallOutcome, Claim, JobRow
from worker.ledger.sql import insert_if_absent, insert_many_if_absent

__all__ = [
    "check_finish",
    "finish_job",
    "finish_many",
    "job_row",
    "mark_many_published",
    "mark_published",
    "open_and_claim",
    "open_and_claim_many",
    "open_or_read",
    "read_job",
    "store_terminal",
]


_READ = select(jobs).where(jobs.c.job_id == bindparam("k_job"))
# PostgreSQL: concurrent finishers queue on the row. SQLite ignores FOR UPDATE; its
# IMMEDIATE transactions are serialised already.
_READ_FOR_UPDATE = _READ.with_for_update()

_STORE_TERMINAL_ONLY = (
    update(jobs)
    .where((jobs.c.job_id == bindparam("k_job")) & jobs.c.terminal_message.is_(None))
    .values(
        terminal_type=bindparam("v_type"),
        terminal_reason=bindparam("v_reason"),
        terminal_message=bindparam("v_message"),
        finished_at=bindparam("v_now"),
    )
)
_STORE_TERMINAL = _STORE_TERMINAL_ONLY.returning(jobs)
# Ordered, so that two batches locking overlapping jobs take their locks in one order.
_READ_MANY_FOR_UPDATE = (
    select(jobs)
    .where(jobs.c.job_id.in_(bindparam("k_jobs", expanding=True)))
    .order_by(jobs.c.job_id)
    .with_for_update()
)

_MARK_PUBLISHED = (
    update(jobs)
    .where(
        (jobs.c.job_id == bindparam("k_job"))
        & jobs.c.terminal_message.is_not(None)
        & jobs.c.published_at.is_(None)
    )
    .values(published_at=bindparam("v_now"))
)

_MARK_MANY_PUBLISHED = (
    update(jobs)
    .where(
        jobs.c.job_id.in_(bindparam("k_jobs", expanding=True))
        & jobs.c.terminal_message.is_not(None)
        & jobs.c.published_at.is_(None)
    )
    .values(published_at=bindparam("v_now"))
)


def job_row(row: Row[Any]) -> JobRow:
    return JobRow(**row._mapping)


def read_job(conn: Connection, job_id: str, *, for_update: bool = False) -> JobRow | None:
    row = conn.execute(_READ_FOR_UPDATE if for_update else _READ, {"k_job": job_id}).first()
    return None if row is None else job_row(row)


def open_and_claim(
    conn: Connection,
    *,
    job: dict[str, Any],
    claim: dict[str, Any],
    now: datetime,
) -> tuple[JobRow, Claim | BudgetRefusal | None]:
    """Open the job (``open_job``) and, if this inserted it, claim its first call too.

    A job just inserted has no call yet, so the claim is fresh, unless a budget cannot take
    the request's worst case: then the job is opened with nothing claimed and the refusal
    comes back. Its deadline is checked against ``now`` so that a job dequeued late is never
    claimed. A job read back (a redelivery) gets no claim here: the caller decides what its
    stored state allows.
    """
    row, inserted = open_or_read(conn, now=now, **job)
    if not inserted or row.deadline <= now:
        return row, None
    try:
        return row, claim_call(conn, job_id=row.job_id, now=now, job_checked=True, **claim)
    except OverBudget as over:  # nothing was claimed or reserved
        return row, over.refusal


_JOB_FIELDS = ("job_id", "kind", "batch", "reply_to", "fingerprint", "deadline", "job_json")


def _job_values(fields: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A new job row: ``open_or_read``'s arguments, with its deadline in UTC."""
    values = {name: fields[name] for name in _JOB_FIELDS}
    values["deadline"] = to_utc(values["deadline"])
    values["created_at"] = now
    return values


def open_and_claim_many(
    conn: Connection, *, writes: list[dict[str, Any]], now: datetime
) -> dict[str, tuple[JobRow, Claim | BudgetRefusal | None]]:
    """``open_and_claim`` for jobs of distinct ids, in two statements (jobs, then calls),
    plus one conditional UPDATE a budget per claim a budget covers (``budget_ops``).

    Only the jobs this inserted are in the answer: one already there (a redelivery) is
    left to ``open_and_claim``, which reads it and checks its fingerprint."""
    # In key order: two batches inserting overlapping ids (one message delivered twice at
    # once) then wait on each other in one order, never in a cycle (PostgreSQL).
    writes = sorted(writes, key=lambda w: str(w["job"]["job_id"]))
    opened = {
        row.job_id: job_row(row)
        for row in insert_many_if_absent(
            conn, jobs, [_job_values(w["job"], now) for w in writes]
        )
    }
    # A job dequeued past its deadline is opened but never claimed, as in open_and_claim.
    claimable = {job_id for job_id, row in opened.items() if row.deadline > now}
    refused: dict[str, BudgetRefusal] = {}
    to_claim: list[dict[str, Any]] = []
    # One SELECT tells which batches have a budget: claims no budget covers reserve nothing.
    budgeted = budget_ops.budgeted_batches(conn, [w["claim"].get("budget") for w in writes])
    for w in writes:
        job_id = w["job"]["job_id"]
        if job_id not in claimable:
            continue
        fields = {"job_id": job_id, **w["claim"]}
        ask = fields.pop("budget", None)
        if ask is not None and budget_ops.applies(conn, ask, budgeted):
            try:
                reservation = budget_ops.reserve(conn, ask, provider=fields["provider"], now=now)
            except OverBudget as over:
                refused[job_id] = over.refusal
                continue
            if reservation is not None:
                fields["reserved_usd"] = reservation.amount
                fields["budget_scopes"] = reservation.scopes_text
        to_claim.append(fields)
    claims: dict[str, Claim | BudgetRefusal] = dict(
        claim_new_calls(conn, claims=to_claim, now=now)
    )
    claims.update(refused)
    return {job_id: (row, claims.get(job_id)) for job_id, row in opened.items()}


def open_or_read(
    conn: Connection,
    *,
    job_id: str,
    kind: str,
    batch: str | None,
    reply_to: str,
    fingerprint: str,
    deadline: datetime,
    job_json: str,
    now: datetime,
) -> tuple[JobRow, bool]:
    """The job's row, and whether this call inserted it."""
    fields = {
        "job_id": job_id,
        "kind": kind,
        "batch": batch,
        "reply_to": reply_to,
        "fingerprint": fingerprint,
        "deadline": deadline,
        "job_json": job_json,
    }
    inserted = insert_if_absent(conn, jobs, _job_values(fields, now))
    if inserted is not None:
        return job_row(inserted), True
    stored = read_job(conn, job_id)
    assert stored is not None  # the conflict that stopped the insert
    if stored.fingerprint != fingerprint:
        raise JobConflict(
            f"job {job_id} was submitted before with different content "
            f"(fingerprint {stored.fingerprint[:12]}…, now {fingerprint[:12]}…); "
            "use a new id for a new job"
        )
    # The stored row wins: a redelivery keeps the deadline of the first delivery.
    return stored, False


def store_terminal(
    conn: Connection,
    *,
    job_id: str,
    message_type: str,
    reason: str | None,
    message_json: str,
    now: datetime,
) -> JobRow | None:
    """Store the terminal message unless one is stored; the finished row, or None."""
    params = _terminal_params(job_id, message_type, reason, message_json, now)
    row = conn.execute(_STORE_TERMINAL, params).first()
    return None if row is None else job_row(row)


def _terminal_params(
    job_id: str, message_type: str, reason: str | None, message_json: str, now: datetime
) -> dict[str, Any]:
    return {
        "k_job": job_id,
        "v_type": message_type,
        "v_reason": reason,
        "v_message": message_json,
        "v_now": now,
    }


def finish_job(
    conn: Connection,
    *,
    job_id: str,
    message_type: str,
    reason: str | None,
    message_json: str,
    outcome: CallOutcome | None,
    now: datetime,
) -> JobRow:
    check_finish(message_type, outcome)
    job = read_job(conn, job_id, for_update=True)
    if job is None:
        raise JobNotFound(job_id)
    if job.finished:
        # First wins: the caller publishes what is stored, never a second version. A call
        # this delivery claimed before the job was finished still gets its outcome (and
        # cost) booked: it may have been paid for.
        if outcome is not None:
            _record_late(conn, job_id, outcome, now)
        return job
    if outcome is not None:
        record_call(conn, job_id=job_id, outcome=outcome, now=now)
    finished = store_terminal(
        conn,
        job_id=job_id,
        message_type=message_type,
        reason=reason,
        message_json=message_json,
        now=now,
    )
    assert finished is not None  # the row is locked and was not finished
    return finished


def _record_late(conn: Connection, job_id: str, outcome: CallOutcome, now: datetime) -> None:
    # Another delivery settled it (ClaimLost), or it was never claimed: what is stored stands.
    with suppress(ClaimLost, CallNotFound):
        record_call(conn, job_id=job_id, outcome=outcome, now=now)


def finish_many(
    conn: Connection, *, writes: list[dict[str, Any]], now: datetime
) -> dict[str, JobRow]:
    """``finish_job`` for jobs of distinct ids, in three statements (read and lock the
    rows, record the calls, store the messages), not three each. By job id: the finished
    row, or the stored one for a job finished before (first wins). A job not found is left
    out (``finish_job`` says so). If a call was not claimed any more (another delivery
    booked it), ``LedgerError``: the caller's transaction must not stand. Each write must
    pass ``check_finish`` first."""
    ids = [write["job_id"] for write in writes]
    rows = {r.job_id: job_row(r) for r in conn.execute(_READ_MANY_FOR_UPDATE, {"k_jobs": ids})}
    done: dict[str, JobRow] = {}
    to_finish = []
    for write in writes:
        row = rows.get(write["job_id"])
        if row is None:
            continue
        if row.finished:
            done[row.job_id] = row
            if write["outcome"] is not None:
                _record_late(conn, row.job_id, write["outcome"], now)
        else:
            to_finish.append((write, row))
    outcomes = [(w["job_id"], w["outcome"]) for w, _ in to_finish if w["outcome"] is not None]
    if outcomes and record_calls(conn, outcomes=outcomes, now=now) != len(outcomes):
        raise LedgerError("a call to record was not claimed any more")
    if to_finish:
        params = [
            _terminal_params(w["job_id"], w["message_type"], w["reason"], w["message_json"], now)
            for w, _ in to_finish
        ]
        if conn.execute(_STORE_TERMINAL_ONLY, params).rowcount != len(params):
            raise LedgerError("a job locked for finishing was finished meanwhile")
    for write, row in to_finish:
        done[row.job_id] = replace(
            row,
            terminal_type=write["message_type"],
            terminal_reason=write["reason"],
            terminal_message=write["message_json"],
            finished_at=now,
        )
    return done


def check_finish(message_type: str, outcome: CallOutcome | None) -> None:
    if message_type not in TERMINAL_TYPES:
        raise ValueError(
            f"a terminal message is one of {sorted(TERMINAL_TYPES)}, not {message_type!r}"
        )
    if outcome is not None:
        validate_outcome(outcome)


def mark_published(conn: Connection, *, job_id: str, now: datetime) -> None:
    changed = conn.execute(_MARK_PUBLISHED, {"k_job": job_id, "v_now": now}).rowcount
    if changed == 1:
        return
    job = read_job(conn, job_id)
    if job is None:
        raise JobNotFound(job_id)
    if not job.finished:
        raise LedgerError(f"job {job_id} has no terminal message to publish yet")
    # Published before: publishing is at least once, the first time stamp stays.


def mark_many_published(conn: Connection, *, job_ids: list[str], now: datetime) -> int:
    """Mark finished, unpublished jobs published in one statement; how many it changed."""
    return int(conn.execute(_MARK_MANY_PUBLISHED, {"k_jobs": job_ids, "v_now": now}).rowcount)
