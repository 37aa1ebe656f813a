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

import os
import sqlite3
from typing import Any, Final

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import ConnectionPoolEntry

from shared.errors import LedgerError
from shared.scrub import mask_urls
from worker.ledger.errors import (
    LedgerConflict,
    LedgerUnavailable,
    NotADatabase,
    OverServerLimit,
    TablesMissing,
)

__all__ = [
    "PG_MAX_OVERFLOW",
    "PG_POOL_SIZE",
    "READ_ONLY",
    "describe_url",
    "make_engine",
    "translate_error",
]

#: Execution option marking a transaction that only reads (SQLite begins it deferred).
READ_ONLY: Final = "ledger_read_only"

_PG_CONNECT_TIMEOUT_S: Final = 10
#: A PostgreSQL ledger's pool (SQLAlchemy's defaults, written out so that the CLI can name
#: them): connections kept open, and more opened at peaks and closed after. Each process
#: that opens a ``Ledger`` may hold their sum against the server's ``max_connections``.
PG_POOL_SIZE: Final = 5
PG_MAX_OVERFLOW: Final = 10
#: What SQLite says of a file that is not one of its databases (SQLITE_NOTADB), in its
#: current wording and in the one of releases before 3.32.
_NOT_SQLITE: Final = ("file is not a database", "file is encrypted or is not a database")
#: PostgreSQL's SQLSTATEs for "the server cannot take this write now, or ended the session":
#: an outage to wait out, whatever DB-API class the driver files them under. psycopg makes
#: class 25 an ``InternalError``, so a read-only server (a failover to a demoted primary, a
#: managed database protecting a full disk: 25006) or a session the server timed out (25P03,
#: 25P04) read as bugs, and paid answers were dropped instead of held until written. 55P03:
#: a lock not granted within a ``lock_timeout`` an operator set (on the role, the database):
#: the other holder ends, and the same statement goes through.
_OUTAGE_SQLSTATES: Final = frozenset({"25006", "25P03", "25P04", "55P03"})
#: Whole classes: 08 connection exception, 53 insufficient resources (disk full, out of
#: memory, too many connections), 57 operator intervention (shutdown, cannot connect now).
_OUTAGE_CLASSES: Final = ("08", "53", "57")
#: Class 54, program limit exceeded, by condition name (PostgreSQL's errcodes.txt). psycopg
#: files it under ``OperationalError``, which read as an outage: retried for ever, answers
#: held, "start the database". The server is up; the statement is what it refuses.
_OVER_LIMIT_CLASS: Final = "54"
#: A transaction the server aborted for a conflict with another running beside it, by
#: condition name: a deadlock (two transactions each waiting on a row the other locked) or a
#: serialization failure. psycopg files both under ``OperationalError``, which read as an
#: outage ("ledger unavailable", the task retried with backoff). The server is up and the
#: same transaction run again goes through: ``LedgerConflict``, run again by the ledger
#: (``worker.ledger.conflicts``). Not the rest of class 40: 40002 (an integrity violation
#: found at commit) and 40003 (completion unknown) are not mended by running again.
_CONFLICT_NAMES: Final = {"40P01": "deadlock_detected", "40001": "serialization_failure"}
_OVER_LIMIT_NAMES: Final = {
    "54000": "program_limit_exceeded",
    "54001": "statement_too_complex",
    "54011": "too_many_columns",
    "54023": "too_many_arguments",
}


def describe_url(url: str | URL) -> str:
    """The URL as it may appear in logs and messages: the password hidden, in the userinfo
    or in the query (libpq takes ``?password=``)."""
    return mask_urls(make_url(url).render_as_string(hide_password=True))


def make_engine(url: str | URL, *, busy_timeout_s: float = 5.0, echo: bool = False) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, busy_timeout_s=busy_timeout_s, echo=echo)
    if parsed.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in parsed.query:
            # Without it an unreachable host hangs for the OS's TCP timeout (minutes).
            connect_args["connect_timeout"] = _PG_CONNECT_TIMEOUT_S
        return create_engine(
            parsed,
            echo=echo,
            pool_pre_ping=True,
            pool_size=PG_POOL_SIZE,
            max_overflow=PG_MAX_OVERFLOW,
            connect_args=connect_args,
        )
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
    """The ``LedgerError`` a database error means, or None for errors that are bugs: the
    database cannot be reached or will not take writes now (``LedgerUnavailable``: read-only,
    out of disk or connections, shutting down, the session ended, a lock not granted in
    time), aborted the transaction for a conflict with another (``LedgerConflict``, a
    ``LedgerUnavailable``: a deadlock or a serialization failure), has no ledger tables
    (``TablesMissing``), refused a statement past one of its limits (``OverServerLimit``),
    or is a file that is not a SQLite database (``NotADatabase``).

    The message names the URL without its password and the driver's own first line, from
    which any password is scrubbed too (drivers sometimes echo connection strings).
    """
    if isinstance(error, exc.TimeoutError):
        return LedgerUnavailable(
            f"ledger unavailable at {describe_url(url)}: connection pool exhausted"
        )
    if not isinstance(error, exc.DBAPIError):
        return None
    if _not_sqlite(error, url):
        return NotADatabase(
            f"DECISIONS_LEDGER_URL={describe_url(url)} names a file that is not a SQLite "
            f"database{_unless_named(url)}; point DECISIONS_LEDGER_URL at a ledger file, or at "
            "a new path for `decisions migrate` to create"
        )
    detail = _driver_detail(error, url)
    if _missing_table(error):
        return TablesMissing(f"ledger tables are missing ({detail}): run `decisions migrate`")
    sqlstate = _sqlstate(error)
    if sqlstate is not None and sqlstate.startswith(_OVER_LIMIT_CLASS):
        # Before the driver's class below: psycopg makes these OperationalErrors.
        name = _OVER_LIMIT_NAMES.get(sqlstate, "program_limit_exceeded")
        return OverServerLimit(
            f"the ledger at {describe_url(url)} refused a statement past one of its limits "
            f"(SQLSTATE {sqlstate} {name}): {detail}; not retried, as the same statement "
            "meets the same limit: report it with this line"
        )
    if sqlstate in _CONFLICT_NAMES:
        # Before the driver's class below too: psycopg makes these OperationalErrors.
        return LedgerConflict(
            f"ledger conflict at {describe_url(url)}: SQLSTATE {sqlstate} "
            f"{_CONFLICT_NAMES[sqlstate]}, the transaction was rolled back by the server "
            f"({detail})",
            sqlstate,
        )
    if (
        isinstance(error, exc.OperationalError | exc.InterfaceError)
        or error.connection_invalidated
        or _server_outage(error)
    ):
        return LedgerUnavailable(f"ledger unavailable at {describe_url(url)}: {detail}")
    return None


def _sqlstate(error: exc.DBAPIError) -> str | None:
    sqlstate = getattr(error.orig, "sqlstate", None)
    return sqlstate if isinstance(sqlstate, str) else None


def _server_outage(error: exc.DBAPIError) -> bool:
    # By SQLSTATE, not by the driver's class: psycopg files some outages under InternalError.
    # SQLite needs no entry: its read-only file, full disk, I/O error and lock all arrive as
    # OperationalError (and out of memory as Python's MemoryError, not a database error).
    sqlstate = _sqlstate(error)
    if sqlstate is None:
        return False
    return sqlstate in _OUTAGE_SQLSTATES or sqlstate.startswith(_OUTAGE_CLASSES)


def _not_sqlite(error: exc.DBAPIError, url: str | URL) -> bool:
    # Only SQLite's own verdict on the file's header: any other DatabaseError (a corrupt
    # page, a statement of ours SQLite refuses) stays a bug to see, not a setting to fix.
    if make_url(url).get_backend_name() != "sqlite":
        return False
    orig = error.orig
    code = getattr(orig, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF == sqlite3.SQLITE_NOTADB) or str(orig) in _NOT_SQLITE


def _unless_named(url: str | URL) -> str:
    # The file as the operator finds it, when the URL does not show it: a relative path is
    # relative to the working directory. (One line: `decisions status` keeps 300 characters.)
    database = str(make_url(url).database or "")
    if database.startswith("file:") or os.path.isabs(database):
        return ""
    return f" ({os.path.abspath(database)})"


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
