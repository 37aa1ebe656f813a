"""``decisions budget resume`` whose reopen PostgreSQL aborts for a deadlock (40P01) with
another transaction locking the same jobs' rows (found by an attack): it withdrew the
escalations from the reviewers' queue, then reopened nothing, and said "ledger
unavailable". The reopen is run again on a conflict, and the resume completes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from shared.escalations import EscalationQueue
from shared.streams import publish_once
from tests.cli.support import decisions, traceback_in
from tests.cli.test_budget_resume import BATCH, exhausted_message, open_batch_job, queued_ids
from tests.support.open_escalations import open_escalations
from tests.support.services import postgres_schema, redis_database, redis_url
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

REDIS_DB = 14
JOBS = ("a-one", "b-two")


def _exhausted(url: str) -> Ledger:
    ledger = Ledger(url)
    ledger.migrate()
    for job_id in JOBS:
        open_batch_job(ledger, job_id)
    with ledger.engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE jobs SET terminal_type = 'escalation', terminal_reason = 'budget_exhausted',"
            " terminal_message = '{}', finished_at = created_at, published_at = created_at"))
    return ledger


def test_a_resume_a_deadlock_aborts_is_run_again_and_completes(tmp_path: Path) -> None:
    with postgres_schema("resume_conflict") as url, redis_database(REDIS_DB) as r:
        ledger = _exhausted(url)
        for job_id in JOBS:
            publish_once(r, stream="r", job_id=job_id, message_type="escalation",
                         message_json=exhausted_message(job_id), escalation=True)
        queue = EscalationQueue(r)
        assert len(open_escalations(queue)) == 2
        # Another transaction (slow to detect deadlocks) locks b-two, waits until the
        # resume holds a-one and waits on b-two, then asks for a-one: a cycle, and the
        # resume's session (deadlock_timeout 1 s) is the one PostgreSQL aborts.
        slow = sa.create_engine(url.replace("options=", "options=-cdeadlock_timeout%3D10s%20"))
        watcher = sa.create_engine(url)
        errors: list[BaseException] = []

        def other() -> None:
            try:
                with slow.begin() as conn:
                    pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                    conn.execute(sa.text("SELECT 1 FROM jobs WHERE job_id='b-two' FOR UPDATE"))
                    until = time.monotonic() + 60
                    q = sa.text("SELECT count(*) FROM pg_stat_activity "
                                "WHERE :pid = ANY(pg_blocking_pids(pid))")
                    while time.monotonic() < until:
                        with watcher.connect() as w:
                            if w.execute(q, {"pid": pid}).scalar_one():
                                break
                        time.sleep(0.01)
                    conn.execute(sa.text("SELECT 1 FROM jobs WHERE job_id='a-one' FOR UPDATE"))
            except BaseException as exc:  # the side PostgreSQL aborted, if this one
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.5)
        done = decisions("budget", "resume", BATCH, cwd=tmp_path, ledger_url=url,
                         redis_url=redis_url(REDIS_DB), broker_url=redis_url(REDIS_DB))
        thread.join(60)
        slow.dispose()
        watcher.dispose()
        assert traceback_in(done.output) is None, done.output
        assert done.code == 0, done.output
        assert "resumed 2 job(s)" in done.stdout, done.output
        assert queued_ids(r) == sorted(JOBS)
        assert open_escalations(queue) == []
        rows = [ledger.get_job(j) for j in JOBS]
        assert all(row is not None and not row.finished and row.resumes == 1 for row in rows)
        # The deadlock happened, as meant: one side was aborted (the resume, then run again).
        assert "sqlstate=40P01" in done.output or errors, done.output
        ledger.dispose()
