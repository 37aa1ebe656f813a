"""Jobs: insert-or-read with conflicts, the outbox (finish first-wins, atomic), publishing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared.errors import JobConflict, LedgerError
from worker.ledger import CallOutcome, Claim, ClaimLost, JobNotFound, JobRow, Ledger, job_ops


def now() -> datetime:
    return datetime.now(UTC)


def later(seconds: float = 60.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


NewJob = Callable[..., JobRow]
ClaimFn = Callable[..., Claim]

ANSWERED = CallOutcome(
    step="decide",
    status="answered",
    receipt_json='{"r": 1}',
    outcome_json='{"a": 1}',
    cost_usd=0.01,
    cost_basis="reported",
)


def finish(
    ledger: Ledger, job_id: str, message: str = '{"type": "result"}', **kw: object
) -> JobRow:
    return ledger.finish_job(
        job_id=job_id,
        message_type=str(kw.pop("message_type", "result")),
        reason=kw.pop("reason", None),  # type: ignore[arg-type]
        message_json=message,
        **kw,  # type: ignore[arg-type]
    )


def test_open_job_inserts(ledger: Ledger) -> None:
    deadline = datetime(2031, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    before = ledger.now()  # the ledger keeps the database's time, not this machine's
    row = ledger.open_job(
        job_id="j-1",
        kind="decide",
        batch="b-1",
        reply_to="replies:b-1",
        fingerprint="f" * 64,
        deadline=deadline,
        job_json='{"id": "j-1"}',
    )
    assert (row.job_id, row.kind, row.batch, row.reply_to) == (
        "j-1",
        "decide",
        "b-1",
        "replies:b-1",
    )
    assert row.deadline == deadline and row.deadline.tzinfo is UTC
    assert row.deadline.hour == 12  # stored and returned in UTC
    assert row.created_at.tzinfo is UTC and before <= row.created_at <= ledger.now()
    assert not row.finished and row.terminal_type is None and row.published_at is None
    assert ledger.get_job("j-1") == row
    assert ledger.get_job("nope") is None


def test_redelivery_reads_the_stored_row(ledger: Ledger, new_job: NewJob) -> None:
    first = new_job("j-2", deadline=later(60))
    again = new_job("j-2", deadline=later(600))  # recomputed by a later delivery
    assert again == first  # the stored deadline wins


def test_conflicting_content_is_refused(ledger: Ledger, new_job: NewJob) -> None:
    new_job("j-3", fingerprint="aaaa")
    with pytest.raises(JobConflict, match="job j-3") as caught:
        new_job("j-3", fingerprint="bbbb")
    assert isinstance(caught.value, LedgerError)
    assert ledger.get_job("j-3").fingerprint == "aaaa"  # type: ignore[union-attr]


def test_naive_deadline_is_refused(ledger: Ledger, new_job: NewJob) -> None:
    with pytest.raises(ValueError, match="naive"):
        new_job(deadline=datetime(2030, 1, 1))


def test_concurrent_open_job(ledger: Ledger, new_job: NewJob) -> None:
    barrier = threading.Barrier(6)
    rows: list[JobRow] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            rows.append(new_job("j-race"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(rows) == 6 and len(set(rows)) == 1


def test_finish_with_outcome(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    claim(job.job_id)
    row = finish(ledger, job.job_id, outcome=ANSWERED)
    assert (row.terminal_type, row.terminal_reason) == ("result", None)
    assert row.terminal_message == '{"type": "result"}'
    assert row.finished and row.finished_at is not None and row.finished_at.tzinfo is UTC
    call = ledger.get_call(job.job_id, "decide")
    assert call is not None and (call.status, call.cost_usd) == ("answered", 0.01)


def test_finish_without_outcome(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    row = finish(
        ledger,
        job.job_id,
        '{"type": "escalation"}',
        message_type="escalation",
        reason="deadline_exceeded",
    )
    assert (row.terminal_type, row.terminal_reason) == ("escalation", "deadline_exceeded")
    assert ledger.calls(job.job_id) == []


def test_finish_first_wins(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    claim(job.job_id)
    claim(job.job_id, "pick.0")
    first = finish(ledger, job.job_id, '{"v": 1}', outcome=ANSWERED)
    second = finish(
        ledger,
        job.job_id,
        '{"v": 2}',
        message_type="escalation",
        reason="low_confidence",
        outcome=CallOutcome(step="pick.0", status="answered"),
    )
    assert second == first
    # The losing finish's message is dropped; its call, claimed before the finish (and so
    # maybe paid for), still gets its outcome booked.
    assert ledger.get_call(job.job_id, "pick.0").status == "answered"  # type: ignore[union-attr]


def test_concurrent_finishes_store_one_message(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    barrier = threading.Barrier(6)
    rows: list[JobRow] = []

    def run(n: int) -> None:
        barrier.wait()
        rows.append(finish(ledger, job.job_id, f'{{"n": {n}}}'))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(rows) == 6 and len({r.terminal_message for r in rows}) == 1
    assert ledger.get_job(job.job_id) == rows[0]


def test_finish_is_one_transaction(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails after the outcome is written, before the message: neither lands."""
    job = new_job()
    claim(job.job_id)

    def failing_store(conn: Connection, **_: object) -> None:
        conn.execute(text("UPDATE no_such_table SET x = 1"))

    monkeypatch.setattr(job_ops, "store_terminal", failing_store)
    with pytest.raises(Exception, match="no_such_table"):
        finish(ledger, job.job_id, outcome=ANSWERED)
    call = ledger.get_call(job.job_id, "decide")
    assert call is not None and call.status == "claimed" and call.receipt_json is None
    assert not ledger.get_job(job.job_id).finished  # type: ignore[union-attr]

    monkeypatch.undo()
    assert finish(ledger, job.job_id, outcome=ANSWERED).finished
    assert ledger.get_call(job.job_id, "decide").status == "answered"  # type: ignore[union-attr]


def test_finish_crashing_in_python_rolls_back(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = new_job()
    claim(job.job_id)

    def crash(conn: Connection, **_: object) -> None:
        raise RuntimeError("worker died between the two writes")

    monkeypatch.setattr(job_ops, "store_terminal", crash)
    with pytest.raises(RuntimeError):
        finish(ledger, job.job_id, outcome=ANSWERED)
    assert ledger.get_call(job.job_id, "decide").status == "claimed"  # type: ignore[union-attr]
    assert ledger.unpublished() == []


def test_finish_with_a_lost_claim_stores_nothing(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    claim(job.job_id, lease_expires=now() - timedelta(seconds=1))
    ledger.expire_claim(job_id=job.job_id, step="decide")
    with pytest.raises(ClaimLost):
        finish(ledger, job.job_id, outcome=ANSWERED)
    assert not ledger.get_job(job.job_id).finished  # type: ignore[union-attr]
    # The runner then escalates what the ledger says.
    row = finish(ledger, job.job_id, message_type="escalation", reason="decision_interrupted")
    assert row.terminal_reason == "decision_interrupted"


def test_finish_refuses_bad_input(ledger: Ledger, new_job: NewJob) -> None:
    with pytest.raises(JobNotFound):
        finish(ledger, "nope")
    job = new_job()
    with pytest.raises(ValueError, match="terminal message is one of"):
        finish(ledger, job.job_id, message_type="resolution")
    with pytest.raises(ValueError, match="a call ends as one of"):
        finish(ledger, job.job_id, outcome=CallOutcome(step="decide", status="claimed"))  # type: ignore[arg-type]
    assert not ledger.get_job(job.job_id).finished  # type: ignore[union-attr]


def test_outbox_relay(ledger: Ledger, new_job: NewJob) -> None:
    jobs = [new_job() for _ in range(4)]
    assert ledger.unpublished() == []
    for job in jobs[:3]:
        finish(ledger, job.job_id, f'{{"id": "{job.job_id}"}}')
    pending = ledger.unpublished()
    assert [j.job_id for j in pending] == [j.job_id for j in jobs[:3]]  # oldest first
    assert [j.job_id for j in ledger.unpublished(limit=2)] == [j.job_id for j in jobs[:2]]

    ledger.mark_published(jobs[0].job_id)
    stamped = ledger.get_job(jobs[0].job_id)
    assert stamped is not None and stamped.published_at is not None
    assert stamped.published_at.tzinfo is UTC
    ledger.mark_published(jobs[0].job_id)  # a re-publish after a crash: harmless
    assert ledger.get_job(jobs[0].job_id) == stamped  # first time stamp kept
    assert [j.job_id for j in ledger.unpublished()] == [j.job_id for j in jobs[1:3]]


def test_mark_published_needs_a_message(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    with pytest.raises(LedgerError, match="no terminal message"):
        ledger.mark_published(job.job_id)
    with pytest.raises(JobNotFound):
        ledger.mark_published("nope")
