"""Group commit: the writes of concurrent jobs share transactions and keep their own fates,
on SQLite and on PostgreSQL. A claim is committed before its caller hears of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.errors import JobConflict, LedgerError
from tests.support.services import postgres_schema
from worker.ledger import CallOutcome, Claim, ClaimLost, JobNotFound, Ledger, LedgerUnavailable
from worker.ledger.batch import MARK_WINDOW_S, GroupCommit

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
]


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    with postgres_schema("groupcommit") as url:
        yield url


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        yield ledger


def soon(seconds: float = 60) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def job(job_id: str, fingerprint: str = "f1") -> dict[str, Any]:
    return {
        "job_id": job_id,
        "kind": "decide",
        "batch": "b",
        "reply_to": "r",
        "fingerprint": fingerprint,
        "deadline": soon(),
        "job_json": "{}",
    }


def claim(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "step": "decide",
        "provider": "faux",
        "model": "faux-1",
        "request_sha256": "ab",
        "lease_expires": soon(90),
    }


def answered(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "message_type": "result",
        "reason": None,
        "message_json": '{"type": "result"}',
        "outcome": CallOutcome(
            step="decide",
            status="answered",
            receipt_json="{}",
            outcome_json="{}",
            cost_usd=None,
            cost_basis=None,
            error_code=None,
        ),
    }


def test_a_whole_job_lifecycle_for_many_jobs_in_few_transactions(ledger: Ledger) -> None:
    group = GroupCommit(ledger)
    ids = [f"j{i:03d}" for i in range(200)]

    async def one(job_id: str) -> Claim:
        await group.open_job(**job(job_id))
        got = await group.claim(**claim(job_id))
        # Committed before the caller may send: another connection sees it now.
        seen = ledger.get_call(job_id, "decide")
        assert seen is not None and seen.status == "claimed"
        await group.finish_job(**answered(job_id))
        await group.mark_published(job_id=job_id)
        return got

    async def scenario() -> list[Claim]:
        return await asyncio.gather(*(one(job_id) for job_id in ids))

    claims = asyncio.run(scenario())
    group.close()
    assert all(c.fresh for c in claims)
    assert group.writes == 4 * len(ids)
    assert group.batches < group.writes / 4  # grouped, not one transaction a write
    status = ledger.status()
    assert status.jobs_total == 200 and status.calls_by_status == {"answered": 200}
    assert all(row.published_at is not None for row in (ledger.get_job(i) for i in ids) if row)


def test_duplicates_in_one_batch_claim_once_and_a_refusal_stays_its_own(ledger: Ledger) -> None:
    group = GroupCommit(ledger)

    async def scenario() -> tuple[list[Any], list[Any]]:
        await group.open_job(**job("dup"))
        await group.open_job(**job("other"))
        opened = await asyncio.gather(
            group.open_job(**job("dup", fingerprint="different")),  # same id, other content
            group.open_job(**job("fresh")),
            return_exceptions=True,
        )
        claims = await asyncio.gather(
            *(group.claim(**claim("dup")) for _ in range(5)),
            group.claim(**claim("other")),
            return_exceptions=True,
        )
        return opened, claims

    opened, claims = asyncio.run(scenario())
    group.close()
    assert isinstance(opened[0], JobConflict)
    assert not isinstance(opened[1], BaseException)  # its neighbour's refusal did not touch it
    assert ledger.get_job("fresh") is not None
    fresh = [c.fresh for c in claims[:5] if isinstance(c, Claim)]
    assert fresh.count(True) == 1 and len(fresh) == 5  # five deliveries, one sends
    assert isinstance(claims[5], Claim) and claims[5].fresh


def test_a_write_failing_in_the_database_fails_alone(ledger: Ledger) -> None:
    group = GroupCommit(ledger)

    async def scenario() -> list[Any]:
        await group.open_job(**job("there"))
        # A claim whose job row does not exist violates the foreign key in the database.
        return await asyncio.gather(
            group.claim(**claim("there")),
            group.claim(**claim("missing")),
            return_exceptions=True,
        )

    good, bad = asyncio.run(scenario())
    group.close()
    assert isinstance(bad, JobNotFound)
    assert isinstance(good, Claim) and good.fresh
    stored = ledger.get_call("there", "decide")
    assert stored is not None and stored.status == "claimed"  # committed despite its neighbour


def test_an_unreachable_ledger_fails_every_write_and_claims_nothing() -> None:
    ledger = Ledger("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1")
    group = GroupCommit(ledger)

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            group.claim(**claim("a")), group.claim(**claim("b")), return_exceptions=True
        )

    outcomes = asyncio.run(scenario())
    group.close()
    assert all(isinstance(o, LedgerUnavailable) for o in outcomes)


def test_a_new_id_twice_in_one_batch_is_opened_once_and_a_different_body_refused(
    ledger: Ledger,
) -> None:
    group = GroupCommit(ledger)

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            group.open_job(**job("twice")),
            group.open_job(**job("twice")),
            group.open_job(**job("twice", fingerprint="other")),
            *(group.open_job(**job(f"n{i}")) for i in range(10)),
            return_exceptions=True,
        )

    first, again, other, *rest = asyncio.run(scenario())
    group.close()
    assert not isinstance(first, BaseException) and not isinstance(again, BaseException)
    assert first.fingerprint == again.fingerprint == "f1"
    assert isinstance(other, JobConflict)
    assert all(not isinstance(r, BaseException) for r in rest)
    assert ledger.status().jobs_total == 11


def test_publishing_marks_are_idempotent_in_a_batch(ledger: Ledger) -> None:
    group = GroupCommit(ledger)

    async def scenario() -> list[Any]:
        for job_id in ("p1", "p2"):
            await group.open_job(**job(job_id))
            await group.claim(**claim(job_id))
            await group.finish_job(**answered(job_id))
        await group.mark_published(job_id="p1")
        # p1 a second time (a redelivery), p2 for the first time, "nope" never opened.
        return await asyncio.gather(
            group.mark_published(job_id="p1"),
            group.mark_published(job_id="p2"),
            group.mark_published(job_id="nope"),
            return_exceptions=True,
        )

    again, first, missing = asyncio.run(scenario())
    group.close()
    assert again is None and first is None
    assert isinstance(missing, JobNotFound)
    p1, p2 = ledger.get_job("p1"), ledger.get_job("p2")
    assert p1 is not None and p1.published_at is not None
    assert p2 is not None and p2.published_at is not None


def test_the_stand_ins_take_the_ledgers_defaults(ledger: Ledger) -> None:
    group = GroupCommit(ledger)

    async def scenario() -> Any:
        await group.open_job(**job("late"))
        # Ledger.finish_job(outcome=None): a job that ends with no call (dequeued too late).
        return await group.finish_job(
            job_id="late",
            message_type="escalation",
            reason="deadline_exceeded",
            message_json='{"type": "escalation"}',
        )

    row = asyncio.run(scenario())
    group.close()
    assert row.terminal_type == "escalation" and row.terminal_reason == "deadline_exceeded"


def test_a_batch_of_mark_published_is_one_statement_and_each_keeps_its_verdict(
    ledger: Ledger,
) -> None:
    ids = [f"m{i:02d}" for i in range(40)]
    for job_id in [*ids, "unfinished"]:
        ledger.open_job(**job(job_id))
    for job_id in ids:
        ledger.claim(**claim(job_id))
        ledger.finish_job(**answered(job_id))
    ledger.mark_published(job_id="m00")  # published before: marking it again is a no-op
    first = ledger.get_job("m00")
    assert first is not None and first.published_at is not None
    group = GroupCommit(ledger)

    async def mark(job_ids: list[str]) -> list[Any]:
        return await asyncio.gather(
            *(group.mark_published(job_id=j) for j in job_ids), return_exceptions=True
        )

    mixed = asyncio.run(mark([*ids[:20], "unfinished", "missing"]))
    assert mixed[:20] == [None] * 20
    assert isinstance(mixed[20], LedgerError) and "no terminal message" in str(mixed[20])
    assert isinstance(mixed[21], JobNotFound)
    updates: list[str] = []

    def count_updates(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE JOBS"):
            updates.append(statement)

    sa.event.listen(ledger.engine, "before_cursor_execute", count_updates)
    clean = asyncio.run(mark(ids[20:]))
    sa.event.remove(ledger.engine, "before_cursor_execute", count_updates)
    group.close()
    assert clean == [None] * 20
    assert len(updates) < 20, updates  # together, not one statement a job
    rows = [ledger.get_job(j) for j in ids]
    assert all(row is not None and row.published_at is not None for row in rows)
    again = ledger.get_job("m00")
    assert again is not None and again.published_at == first.published_at  # first stamp stays
    unfinished = ledger.get_job("unfinished")
    assert unfinished is not None and unfinished.published_at is None


def test_new_jobs_in_a_batch_open_and_claim_in_two_statements(ledger: Ledger) -> None:
    ledger.open_job(**job("old"))  # a redelivery: read back, never claimed by this write
    late = {**job("late"), "deadline": datetime.now(UTC) - timedelta(seconds=1)}
    fresh = [f"n{i:02d}" for i in range(30)]
    inserts: list[str] = []

    def count_inserts(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO"):
            inserts.append(statement.split("(")[0])

    group = GroupCommit(ledger)
    step = {k: v for k, v in claim("-").items() if k != "job_id"}  # as the runner passes it

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            *(group.open_and_claim(job=job(j), claim=step) for j in fresh),
            group.open_and_claim(job=job("old"), claim=step),
            group.open_and_claim(job=late, claim=step),
            group.open_and_claim(job=job("old", fingerprint="other"), claim=step),
            return_exceptions=True,
        )

    sa.event.listen(ledger.engine, "before_cursor_execute", count_inserts)
    answers = asyncio.run(scenario())
    sa.event.remove(ledger.engine, "before_cursor_execute", count_inserts)
    group.close()
    for job_id, (row, got) in zip(fresh, answers[:30], strict=True):
        assert row.job_id == job_id and got is not None and got.fresh
        call = ledger.get_call(job_id, "decide")
        assert call is not None and call.status == "claimed" and call.claims == 1
    old_row, old_claim = answers[30]
    assert old_row.job_id == "old" and old_claim is None
    late_row, late_claim = answers[31]
    assert late_row.job_id == "late" and late_claim is None
    assert ledger.get_call("late", "decide") is None
    assert isinstance(answers[32], JobConflict)  # its own verdict, its neighbours untouched
    # 33 writes: the new jobs' rows and claims as a few statements, not 60.
    assert len(inserts) < 12, inserts


def test_a_batch_of_finishes_is_few_statements_and_each_keeps_its_verdict(
    ledger: Ledger,
) -> None:
    ids = [f"f{i:02d}" for i in range(30)]
    for job_id in [*ids, "lost", "done"]:
        ledger.open_job(**job(job_id))
        ledger.claim(**{**claim(job_id), "lease_expires": soon(90)})
    ledger.finish_job(**answered("done"))
    first = ledger.get_job("done")
    # Another delivery found "lost"'s lease over and booked the call unknown.
    ledger.expire_claim(
        job_id="lost", step="decide", now=soon(120), cost_usd=None, cost_basis=None
    )
    updates: list[str] = []

    def count_updates(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE CALLS"):
            updates.append(statement)

    group = GroupCommit(ledger)

    async def finish(job_ids: list[str]) -> list[Any]:
        return await asyncio.gather(
            *(group.finish_job(**answered(j)) for j in job_ids), return_exceptions=True
        )

    sa.event.listen(ledger.engine, "before_cursor_execute", count_updates)
    clean = asyncio.run(finish(ids[:20]))
    clean_updates = len(updates)
    mixed = asyncio.run(finish([*ids[20:], "lost", "done", "missing"]))
    sa.event.remove(ledger.engine, "before_cursor_execute", count_updates)
    group.close()
    assert [row.job_id for row in clean] == ids[:20]
    assert all(row.terminal_type == "result" and row.finished_at is not None for row in clean)
    assert clean_updates < 20, clean_updates  # together, not one statement a job
    assert [row.job_id for row in mixed[:10]] == ids[20:]
    assert isinstance(mixed[10], ClaimLost) and mixed[10].call.status == "unknown"
    assert first is not None and mixed[11].finished_at == first.finished_at  # first wins
    assert isinstance(mixed[12], JobNotFound)
    for job_id in ids:
        row, call = ledger.get_job(job_id), ledger.get_call(job_id, "decide")
        assert row is not None and row.terminal_message == '{"type": "result"}'
        assert call is not None and call.status == "answered"
    lost = ledger.get_job("lost")
    assert lost is not None and not lost.finished  # the refused finish left nothing behind


def test_a_later_mark_rides_on_the_next_batch_or_is_written_after_its_window(
    ledger: Ledger,
) -> None:
    for job_id in ("ride", "alone", "late"):
        ledger.open_job(**job(job_id))
        ledger.claim(**claim(job_id))
        ledger.finish_job(**answered(job_id))
    ledger.mark_published(job_id="late")
    stamped = ledger.get_job("late")
    group = GroupCommit(ledger)

    async def scenario() -> tuple[Any, Any, Any]:
        group.mark_published_later("ride")
        group.mark_published_later("late")  # published before: its first stamp stays
        await group.open_job(**job("next"))  # the next write's transaction takes the marks
        ride = ledger.get_job("ride")
        group.mark_published_later("alone")
        alone = ledger.get_job("alone")
        for _ in range(200):  # no write comes: a batch of its own, a window later
            if alone is not None and alone.published_at is not None:
                break
            await asyncio.sleep(MARK_WINDOW_S)
            alone = ledger.get_job("alone")
        return ride, alone, ledger.get_job("late")

    ride, alone, late = asyncio.run(scenario())
    group.close()
    assert ride is not None and ride.published_at is not None
    assert alone is not None and alone.published_at is not None
    assert late is not None and stamped is not None and late.published_at == stamped.published_at


def test_a_mark_waits_its_own_window_not_an_earlier_marks_timer(ledger: Ledger) -> None:
    """Found at 25 single-job messages a second: a mark arriving after a batch had taken the
    marks before it was written alone by their timer, a few ms later, not a window later;
    so a job cost three transactions, not two. Its own window counts, and the next batch
    within it takes it."""
    for job_id in ("first", "second"):
        ledger.open_job(**job(job_id))
        ledger.claim(**claim(job_id))
        ledger.finish_job(**answered(job_id))
    window = 1.0
    group = GroupCommit(ledger, mark_window_s=window)

    async def scenario() -> tuple[Any, Any, int]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        group.mark_published_later("first")  # its timer: at start + window
        await group.open_job(**job("n1"))  # takes "first"
        await asyncio.sleep(start + window / 2 - loop.time())
        group.mark_published_later("second")  # its own window ends at 1.5 windows
        # Past the first mark's timer, well within the second's window.
        await asyncio.sleep(start + window * 1.2 - loop.time())
        waiting = ledger.get_job("second")
        await group.open_job(**job("n2"))  # the next batch takes it
        return waiting, ledger.get_job("second"), group.batches

    waiting, marked, batches = asyncio.run(scenario())
    group.close()
    assert waiting is not None and waiting.published_at is None
    assert marked is not None and marked.published_at is not None
    assert batches == 2  # n1's and n2's transactions, and no third for the mark alone


def test_the_transactions_and_writes_are_counted_for_prometheus(ledger: Ledger) -> None:
    """``decisions_group_commit_transactions_total`` and ``_writes_total`` move with the
    group's own counts: what an operator divides to see how many writes share a commit."""
    from prometheus_client import REGISTRY

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    names = ("decisions_group_commit_transactions_total", "decisions_group_commit_writes_total")
    before = [sample(name) for name in names]
    group = GroupCommit(ledger)

    async def scenario() -> None:
        await asyncio.gather(*(group.open_and_claim(job=job(f"m{i}"), claim=claim(f"m{i}"))
                               for i in range(20)))
        await asyncio.gather(*(group.finish_job(**answered(f"m{i}")) for i in range(20)))

    asyncio.run(scenario())
    group.close()
    after = [sample(name) for name in names]
    assert group.writes == 40 and group.batches >= 2
    assert [a - b for a, b in zip(after, before, strict=True)] == [group.batches, group.writes]


def test_marks_put_back_after_an_outage_are_written_by_the_next_marks_window(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark's batch that met an outage puts its marks back; the marks that come after
    them must still get a window of their own. Before, a mark arriving on a list that was
    not empty armed no timer, so with no other write coming none of them was written (the
    reaper's relay found them minutes later)."""
    for job_id in ("before", "after"):
        ledger.open_job(**job(job_id))
        ledger.claim(**claim(job_id))
        ledger.finish_job(**answered(job_id))
    window = 0.05
    group = GroupCommit(ledger, mark_window_s=window)
    real = ledger.transaction
    down = {"on": True}

    def transaction(**kwargs: Any) -> Any:
        if down["on"]:
            raise LedgerUnavailable("ledger down (test)")
        return real(**kwargs)

    monkeypatch.setattr(ledger, "transaction", transaction)

    async def scenario() -> tuple[Any, Any]:
        group.mark_published_later("before")
        await asyncio.sleep(window * 4)  # its window's batch met the outage: put back
        down["on"] = False
        group.mark_published_later("after")
        for _ in range(100):
            await asyncio.sleep(window)
            after = ledger.get_job("after")
            if after is not None and after.published_at is not None:
                break
        return ledger.get_job("before"), ledger.get_job("after")

    before, after = asyncio.run(scenario())
    group.close()
    assert after is not None and after.published_at is not None
    assert before is not None and before.published_at is not None
