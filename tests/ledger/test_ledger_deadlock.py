"""Two deliveries of the same jobs whose judgment claims lock the jobs' rows in opposite
orders deadlock on PostgreSQL: the server aborts one transaction (SQLSTATE 40P01). That is a
conflict between two live transactions, not an outage: the aborted side is run again at once
and finds what the other committed, each job claimed once, nothing held back as "ledger
unavailable". Driven through the ledger's own functions on a real server, no mock.

The deadlock is made deterministic: the group commit's connection detects deadlocks after
50 ms, the other delivery's after 10 s, and the other delivery asks for its second row only
once the group commit waits on its first; so the group commit's batch is the one aborted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from structlog.testing import capture_logs

from tests.ledger.conftest import judgment_claim, open_jobs
from worker.ledger import Claim, Ledger, LedgerUnavailable
from worker.ledger.batch import GroupCommit
from worker.ledger.call_ops import claim_call
from worker.process.batching import Item

pytestmark = pytest.mark.integration

JOBS = ("job-a", "job-b")  # each claimed with a plan: its row locked for update


@pytest.fixture
def ledgers(pg_url: Callable[..., str]) -> Iterator[tuple[Ledger, Ledger, Engine]]:
    """The group commit's ledger (quick to detect a deadlock), another delivery's (slow to),
    and an engine that watches the server's sessions."""
    quick = Ledger(pg_url("-cdeadlock_timeout=50ms"))
    slow = Ledger(pg_url("-cdeadlock_timeout=10s"))
    watcher = create_engine(pg_url())
    try:
        quick.migrate()
        open_jobs(slow, *JOBS)
        yield quick, slow, watcher
    finally:
        quick.dispose()
        slow.dispose()
        watcher.dispose()


def wait_until_blocked_by(watcher: Engine, pid: int, timeout_s: float = 10.0) -> None:
    """Return once some session waits on a lock ``pid``'s transaction holds."""
    deadline = time.monotonic() + timeout_s
    query = text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))")
    while time.monotonic() < deadline:
        with watcher.connect() as conn:
            if conn.execute(query, {"pid": pid}).scalar_one():
                return
        time.sleep(0.01)
    raise AssertionError(f"no session came to wait on {pid}'s locks")


def test_a_batch_aborted_by_a_deadlock_is_retried_and_each_job_is_claimed_once(
    ledgers: tuple[Ledger, Ledger, Engine],
) -> None:
    quick, slow, watcher = ledgers
    group = GroupCommit(quick)
    loop = asyncio.new_event_loop()
    # One batch of the group commit: job-a's claim, then job-b's.
    writes = [Item("claim", judgment_claim(job_id), loop, loop.create_future()) for job_id in JOBS]
    theirs: dict[str, Claim] = {}
    holding = threading.Event()
    failures: list[BaseException] = []

    def other_delivery() -> None:
        # The same two jobs, in the other order: job-b locked, then job-a.
        try:
            with slow.transaction() as conn:
                pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
                theirs["job-b"] = claim_call(conn, now=slow.now(), **judgment_claim("job-b"))
                holding.set()
                wait_until_blocked_by(watcher, pid)  # the batch holds job-a, waits on job-b
                theirs["job-a"] = claim_call(conn, now=slow.now(), **judgment_claim("job-a"))
        except BaseException as error:
            failures.append(error)
            holding.set()

    other = threading.Thread(target=other_delivery)
    other.start()
    try:
        assert holding.wait(10)
        with capture_logs() as logs:
            group.handle(writes)  # what the writer thread runs for one batch
    finally:
        other.join(30)
        loop.close()
    assert not failures, failures

    # The batch's writes all ended with a claim: none failed as an outage.
    errors = [w.error for w in writes]
    assert errors == [None, None], f"the batch's writes failed: {errors!r}"
    ours = {w.kwargs["job_id"]: w.result for w in writes}
    # Each job claimed once, by one delivery or the other: at most one request each is sent.
    for job_id in JOBS:
        assert isinstance(ours[job_id], Claim)
        assert [theirs[job_id].fresh, ours[job_id].fresh].count(True) == 1, job_id
        stored = quick.get_call(job_id, "decide")
        assert stored is not None and stored.status == "claimed" and stored.claims == 1
    # The log says what happened: a conflict, its SQLSTATE, retried; no outage.
    conflicts = [e for e in logs if e["event"] == "ledger.conflict"]
    assert conflicts, logs
    assert conflicts[0]["sqlstate"] == "40P01" and conflicts[0]["retrying"] is True
    assert conflicts[0]["log_level"] == "warning"
    assert not [e for e in logs if "unavailable" in e["event"]]
    assert not any(isinstance(w.error, LedgerUnavailable) for w in writes)


def test_a_batch_takes_its_job_rows_in_job_id_order(
    ledgers: tuple[Ledger, Ledger, Engine],
) -> None:
    # Two batches of the same jobs then wait for each other in one order, never in a cycle.
    quick, _, _ = ledgers
    locked: list[str] = []

    @event.listens_for(quick.engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "FOR UPDATE" in statement and "FROM jobs" in statement and isinstance(params, dict):
            locked.extend(v for v in params.values() if v in JOBS)

    group = GroupCommit(quick)
    loop = asyncio.new_event_loop()
    try:
        writes = [
            Item("claim", judgment_claim(job_id), loop, loop.create_future())
            for job_id in reversed(JOBS)
        ]
        group.handle(writes)
    finally:
        loop.close()
    assert [w.error for w in writes] == [None, None]
    assert locked == list(JOBS)
