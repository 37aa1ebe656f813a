"""PostgreSQL errors that are neither outages of the usual kinds nor bugs of ours: a lock not
granted in time (55P03, an operator's ``lock_timeout``) is waited out like an outage; a
statement past a program limit (class 54) is said once and not retried."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import create_engine, exc, text

from worker.cli.errors import explain
from worker.ledger import Ledger, LedgerUnavailable
from worker.ledger.engine import translate_error
from worker.ledger.errors import OverServerLimit
from worker.process.logs import SelfExplainedFailures
from worker.tasks import RETRIED

URL = "postgresql+psycopg://u:pw@db/ledger"


def wrapped(sqlstate: str, wrapper: type[exc.DBAPIError] | None = None) -> exc.DBAPIError:
    orig = psycopg.errors.lookup(sqlstate)("the server's own words\nDETAIL: more")
    if wrapper is not None:
        return wrapper("UPDATE", None, orig)
    return exc.DBAPIError.instance("UPDATE", None, orig, psycopg.Error)


@pytest.mark.parametrize("wrapper", [None, exc.InternalError, exc.DatabaseError])
def test_a_lock_not_granted_in_time_is_an_outage_whatever_class_the_driver_gives_it(
    wrapper: type[exc.DBAPIError] | None,
) -> None:
    # psycopg files 55P03 under OperationalError; another driver (or psycopg's next
    # release) may not: the SQLSTATE decides, as for the other outages.
    translated = translate_error(wrapped("55P03", wrapper), URL)
    assert isinstance(translated, LedgerUnavailable)
    assert "u:***@db" in str(translated) and "pw" not in str(translated)


@pytest.mark.parametrize("sqlstate", ["54000", "54001", "54011", "54023"])
def test_a_statement_past_a_server_limit_is_no_outage_and_says_what_it_is(
    sqlstate: str,
) -> None:
    # psycopg files class 54 under OperationalError: it was LedgerUnavailable, retried for
    # ever by the task and by the held answers, and explained as a server to start.
    translated = translate_error(wrapped(sqlstate), URL)
    assert isinstance(translated, OverServerLimit)
    assert not isinstance(translated, RETRIED)
    said = str(translated)
    assert f"SQLSTATE {sqlstate}" in said
    assert "limit" in said and "not retried" in said
    assert "\n" not in said and "pw" not in said
    assert "the server's own words" in said and "DETAIL" not in said
    lines = explain(translated).lines()
    assert 1 <= len(lines) <= 2
    assert "cannot be reached" not in " ".join(lines)
    assert "Traceback" not in " ".join(lines)


@pytest.mark.integration
def test_postgres_lock_timeout_on_a_locked_row_is_an_outage(
    pg_url: Callable[..., str],
) -> None:
    # Migrated without the lock_timeout: migrating waits on one advisory lock for the whole
    # server, which a migration of another test (another xdist worker) may hold past 200 ms.
    with Ledger(pg_url()) as migrating:
        migrating.migrate()
    ledger = Ledger(pg_url("-clock_timeout=200"))
    holder = create_engine(pg_url())
    try:
        with holder.begin() as conn:
            conn.execute(text("CREATE TABLE held (id int PRIMARY KEY, n int)"))
            conn.execute(text("INSERT INTO held VALUES (1, 0)"))
        with holder.begin() as conn:
            conn.execute(text("SELECT n FROM held WHERE id = 1 FOR UPDATE"))
            with pytest.raises(LedgerUnavailable, match="LockNotAvailable"), \
                    ledger.transaction() as mine:
                mine.execute(text("UPDATE held SET n = 1 WHERE id = 1"))
        # The lock gone, the same write goes through: a wait mended it.
        with ledger.transaction() as mine:
            mine.execute(text("UPDATE held SET n = 1 WHERE id = 1"))
    finally:
        ledger.dispose()
        holder.dispose()


@pytest.mark.integration
def test_postgres_refusing_too_many_arguments_is_over_a_limit(
    pg_url: Callable[..., str],
) -> None:
    ledger = Ledger(pg_url())
    try:
        ledger.migrate()
        many = ", ".join(str(n) for n in range(101))  # PostgreSQL takes 100 (FUNC_MAX_ARGS)
        with pytest.raises(OverServerLimit, match="SQLSTATE 54023") as raised, \
                ledger.transaction() as conn:
            conn.execute(text(f"SELECT concat({many})"))
        assert "\n" not in str(raised.value)
        with ledger.transaction() as conn:  # the ledger itself is fine
            assert conn.execute(text("SELECT 1")).scalar() == 1
    finally:
        ledger.dispose()


def test_a_worker_logs_a_task_failed_past_a_server_limit_without_a_traceback() -> None:
    error = translate_error(wrapped("54001"), URL)
    assert isinstance(error, OverServerLimit)
    unforeseen = RuntimeError("a bug")
    records = []
    for raised in (error, unforeseen):
        try:
            raise raised
        except Exception:
            # As Celery's tracer logs a task that raised (celery.app.trace, with exc_info).
            records.append(logging.getLogger("celery.app.trace").makeRecord(
                "celery.app.trace", logging.ERROR, __file__, 0,
                "Task %s raised unexpected: %r", ("decisions.run_jobs", raised), sys.exc_info(),
            ))
    said, bug = records
    assert SelfExplainedFailures().filter(said) and SelfExplainedFailures().filter(bug)
    assert said.exc_info is None and "SQLSTATE 54001" in said.getMessage()
    assert bug.exc_info is not None  # a bug keeps its traceback
