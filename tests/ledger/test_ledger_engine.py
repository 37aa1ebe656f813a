"""Engine behaviour: SQLite transaction control and pragmas, failing closed, no passwords."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, exc, text

from shared.errors import LedgerError
from shared.settings import Settings
from tests.ledger.conftest import open_jobs
from worker.ledger import Ledger, LedgerUnavailable
from worker.ledger.engine import translate_error


def later(seconds: float = 60.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def sqlite_ledger(tmp_path: Path, **kw: Any) -> Ledger:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", **kw)
    ledger.migrate()
    return ledger


def open_one(ledger: Ledger, job_id: str = "j") -> None:
    open_jobs(ledger, job_id)


def test_from_settings(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"ledger_url": f"sqlite:///{tmp_path / 's.db'}", "sqlite_busy_timeout_s": 1.5}
    )
    ledger = Ledger.from_settings(settings)
    try:
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1500
    finally:
        ledger.dispose()


def test_sqlite_pragmas(tmp_path: Path) -> None:
    ledger = sqlite_ledger(tmp_path)
    try:
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    finally:
        ledger.dispose()


def test_sqlite_writes_begin_immediate_reads_deferred(tmp_path: Path) -> None:
    ledger = sqlite_ledger(tmp_path)
    ledger.now()  # the clock's first reading of the database's time: a deferred read
    seen: list[str] = []

    @event.listens_for(ledger.engine, "before_cursor_execute")
    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.startswith("BEGIN"):
            seen.append(statement)

    try:
        open_one(ledger)
        assert seen == ["BEGIN IMMEDIATE"]
        seen.clear()
        ledger.get_job("j")
        ledger.status()
        assert seen == ["BEGIN", "BEGIN"]
    finally:
        ledger.dispose()


def test_sqlite_lock_waits_then_fails_closed(tmp_path: Path) -> None:
    ledger = sqlite_ledger(tmp_path, busy_timeout_s=0.3)
    open_one(ledger)
    other = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        # Readers are not blocked by a writer in WAL mode.
        assert ledger.get_job("j") is not None
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable, match="database is locked") as caught:
            ledger.claim(
                job_id="j",
                step="decide",
                provider="faux",
                model=None,
                request_sha256=None,
                lease_expires=later(60),
            )
        waited = time.monotonic() - started
        assert 0.25 <= waited < 5, waited  # it waited for the busy timeout, then gave up
        assert "ledger unavailable at sqlite:///" in str(caught.value)
        other.execute("ROLLBACK")
        assert ledger.get_call("j", "decide") is None  # the failed claim left nothing
        got = ledger.claim(
            job_id="j",
            step="decide",
            provider="faux",
            model=None,
            request_sha256=None,
            lease_expires=later(60),
        )
        assert got.fresh
    finally:
        other.close()
        ledger.dispose()


def test_postgres_unreachable_fails_closed_without_password() -> None:
    ledger = Ledger("postgresql+psycopg://worker:s3cr3t-pw@127.0.0.1:1/ledger")
    try:
        assert "s3cr3t-pw" not in repr(ledger) and "s3cr3t-pw" not in ledger.url
        for attempt in (
            lambda: ledger.get_job("j"),
            lambda: ledger.claim(
                job_id="j",
                step="decide",
                provider="faux",
                model=None,
                request_sha256=None,
                lease_expires=later(60),
            ),
            ledger.check_schema,
        ):
            with pytest.raises(LedgerUnavailable) as caught:
                attempt()
            message = str(caught.value)
            assert message.startswith("ledger unavailable at postgresql+psycopg://worker:***@")
            assert "s3cr3t-pw" not in message
    finally:
        ledger.dispose()


@pytest.mark.integration
def test_postgres_reconnects_after_the_server_dropped_a_connection(
    pg_url: Callable[..., str], pg_admin: Callable[[str], Any]
) -> None:
    ledger = Ledger(pg_url())
    try:
        ledger.migrate()
        with ledger.engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        pg_admin(f"SELECT pg_terminate_backend({int(pid)})")  # the pooled connection dies
        open_one(ledger)  # pool_pre_ping replaced it
        assert ledger.get_job("j") is not None
    finally:
        ledger.dispose()


@pytest.mark.integration
def test_postgres_connection_lost_mid_transaction_raises(
    pg_url: Callable[..., str], pg_admin: Callable[[str], Any]
) -> None:
    ledger = Ledger(pg_url())
    try:
        ledger.migrate()
        open_one(ledger)
        with (
            pytest.raises(LedgerUnavailable, match="ledger unavailable"),
            ledger.transaction() as conn,
        ):
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            pg_admin(f"SELECT pg_terminate_backend({int(pid)})")
            conn.execute(text("UPDATE jobs SET batch = 'x'"))
        assert ledger.get_job("j").batch is None  # type: ignore[union-attr]
    finally:
        ledger.dispose()


@pytest.mark.integration
def test_postgres_session_time_zone_does_not_leak(pg_url: Callable[..., str]) -> None:
    ledger = Ledger(pg_url())
    tokyo = Ledger(pg_url("-ctimezone=Asia/Tokyo"))
    try:
        ledger.migrate()
        deadline = datetime(2030, 1, 1, 9, 30, tzinfo=timezone(timedelta(hours=-5)))
        tokyo.open_job(
            job_id="tz",
            kind="decide",
            batch=None,
            reply_to="r",
            fingerprint="f",
            deadline=deadline,
            job_json="{}",
        )
        for reader in (ledger, tokyo):
            row = reader.get_job("tz")
            assert row is not None and row.deadline == deadline
            assert row.deadline.tzinfo is UTC and row.deadline.hour == 14
    finally:
        ledger.dispose()
        tokyo.dispose()


def _use_after_fork(ledger: Ledger, out: Any) -> None:
    try:
        ledger.get_job("j")
        out.put("used")
    except LedgerError as error:
        out.put(str(error))


def test_a_ledger_is_not_used_across_fork(tmp_path: Path) -> None:
    ledger = sqlite_ledger(tmp_path)
    open_one(ledger)
    try:
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_use_after_fork, args=(ledger, out))
        child.start()
        message = out.get(timeout=30)
        child.join(30)
        assert "create the Ledger in the process that uses it" in message
        assert ledger.get_job("j") is not None  # the parent's ledger is unharmed
    finally:
        ledger.dispose()


@pytest.mark.parametrize(
    "sqlstate",
    ["25006", "25P03", "25P04", "57P01", "57P03", "53100", "53200", "53300", "08006"],
)
def test_a_server_that_cannot_take_writes_now_is_an_outage(sqlstate: str) -> None:
    # psycopg's classes for these differ (25xxx are InternalError): the SQLSTATE decides.
    orig = psycopg.errors.lookup(sqlstate)("the server's own words")
    error = exc.DBAPIError.instance("INSERT", None, orig, psycopg.Error)
    translated = translate_error(error, "postgresql+psycopg://u:pw@db/ledger")
    assert isinstance(translated, LedgerUnavailable)
    assert str(translated).startswith("ledger unavailable at postgresql+psycopg://u:***@db/ledger")


@pytest.mark.parametrize("sqlstate", ["25001", "42601", "XX000", "23505"])
def test_a_statement_the_server_refuses_stays_a_bug(sqlstate: str) -> None:
    orig = psycopg.errors.lookup(sqlstate)("the server's own words")
    error = exc.DBAPIError.instance("INSERT", None, orig, psycopg.Error)
    assert translate_error(error, "postgresql+psycopg://db/ledger") is None


@pytest.mark.integration
def test_postgres_ending_an_idle_transaction_is_an_outage(pg_url: Callable[..., str]) -> None:
    ledger = Ledger(pg_url("-cidle_in_transaction_session_timeout=100"))
    try:
        ledger.migrate()
        with pytest.raises(LedgerUnavailable), ledger.transaction() as conn:
            conn.execute(text("SELECT 1"))
            time.sleep(0.5)  # the server ends the session (25P03)
            conn.execute(text("UPDATE jobs SET batch = 'x'"))
        open_one(ledger)  # and the next transaction has a live connection
    finally:
        ledger.dispose()
