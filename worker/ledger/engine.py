"""Engines the ledger can trust: SQLite that several processes share, PostgreSQL that fails closed.

SQLite. The ``sqlite3`` driver begins transactions lazily (deferred, and only before DML),
so two processes can both read, then both try to write, and one gets "database is locked"
at once whatever the busy timeout: a deferred reader cannot wait its way up to a writer.
Following SQLAlchemy's recipe ("Enabling Non-Legacy SQLite Transactional Modes") the driver's
transaction control is switched off on ``connect`` and every write transaction is begun
``BEGIN IMMEDIATE`` on ``begin``, so it takes the write lock first and waits for it (busy
timeout) instead of failing halfway. Read-only transactions (execution option
``READ_ONLY``) begin deferred: in WAL mode readers never wait for the writer. WAL with
``synchronous=NORMAL`` keeps commits cheap and durable against process crashes; foreign keys
are off in SQLite unless asked for.

PostgreSQL. ``pool_pre_ping`` replaces connections the server closed (restart, failover)
before a statement relies on them; a ledger that cannot be reached raises, so a claim is
never reported that was not committed.

Processes. An engine holds open connections: create it (create the ``Ledger``) in the
process that uses it, e.g. in Celery's ``worker_process_init``, never before a fork.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import ConnectionPoolEntry

from shared.errors import LedgerError, SchemaBehind
from worker.ledger.errors import LedgerUnavailable

__all__ = ["READ_ONLY", "describe_url", "make_engine", "translate_error"]

#: Execution option marking a transaction that only reads (SQLite begins it deferred).
READ_ONLY: Final = "ledger_read_only"

_PG_CONNECT_TIMEOUT_S: Final = 10


def describe_url(url: str | URL) -> str:
    """The URL as it may appear in logs and messages: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def make_engine(url: str | URL, *, busy_timeout_s: float = 5.0, echo: bool = False) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, busy_timeout_s=busy_timeout_s, echo=echo)
    if parsed.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in parsed.query:
            # Without it an unreachable host hangs for the OS's TCP timeout (minutes).
            connect_args["connect_timeout"] = _PG_CONNECT_TIMEOUT_S
        return create_engine(parsed, echo=echo, pool_pre_ping=True, connect_args=connect_args)
    return create_engine(parsed, echo=echo, pool_pre_ping=True)


def _sqlite_engine(url: URL, *, busy_timeout_s: float, echo: bool) -> Engine:
    engine = create_engine(url, echo=echo, connect_args={"timeout": busy_timeout_s})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take BEGIN away from the driver; _on_begin emits our own.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def translate_error(error: exc.SQLAlchemyError, url: str | URL) -> LedgerError | None:
    """The ``LedgerError`` a database error means, or None for errors that are bugs.

    The message names the URL without its password and the driver's own first line, from
    which any password is scrubbed too (drivers sometimes echo connection strings).
    """
    if isinstance(error, exc.TimeoutError):
        return LedgerUnavailable(
            f"ledger unavailable at {describe_url(url)}: connection pool exhausted"
        )
    if not isinstance(error, exc.DBAPIError):
        return None
    detail = _driver_detail(error, url)
    if _missing_table(error):
        return SchemaBehind(f"ledger tables are missing ({detail}): run `decisions migrate`")
    if isinstance(error, exc.OperationalError | exc.InterfaceError) or error.connection_invalidated:
        return LedgerUnavailable(f"ledger unavailable at {describe_url(url)}: {detail}")
    return None


def _missing_table(error: exc.DBAPIError) -> bool:
    # SQLite says so in an OperationalError, psycopg with its own class (a ProgrammingError).
    return type(error.orig).__name__ == "UndefinedTable" or "no such table" in str(error.orig)


def _driver_detail(error: exc.DBAPIError, url: str | URL) -> str:
    orig = error.orig
    lines = str(orig).strip().splitlines()
    detail = f"{type(orig).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    password = make_url(url).password
    if password:
        detail = detail.replace(str(password), "***")
    return detail
