"""Schema versions: Alembic driven from code, no ``alembic.ini`` needed.

``migrate`` runs ``alembic upgrade head`` on a connection the caller already holds in a
transaction, so an upgrade is all or nothing and shares the Ledger's engine settings.
``check_schema`` is what a worker runs at start: it refuses to work on a schema older (or
newer) than this code, because a worker writing to the wrong columns cannot keep the
at-most-once promise.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import Connection

from shared.errors import ConfigurationError, LedgerError, SchemaAhead, SchemaBehind
from worker.ledger.engine import make_engine
from worker.ledger.errors import TablesMissing

__all__ = [
    "MIGRATIONS_DIR",
    "alembic_config",
    "check_schema",
    "current_revision",
    "head_revision",
    "migrate",
]

MIGRATIONS_DIR: Final = Path(__file__).resolve().with_name("migrations")
_TABLES: Final = ("jobs", "calls", "labels")
# Any fixed key: every worker of a fleet takes the same one, so only one migrates at a time.
_PG_MIGRATE_LOCK: Final = 0x6C656467  # "ledg"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config built in code; with ``connection``, env.py migrates on that one."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The revision this code needs (one linear history, so one head)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships 0001
        raise LedgerError(f"no ledger migrations found in {MIGRATIONS_DIR}")
    return head


def current_revision(target: Connection | Engine | str) -> str | None:
    """The revision the database is at; None when it was never migrated.

    ``target`` is an open connection, an engine, or a URL (opened and closed here).
    """
    if isinstance(target, Connection):
        return MigrationContext.configure(target).get_current_revision()
    engine = make_engine(target) if isinstance(target, str) else target
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if isinstance(target, str):
            engine.dispose()


def migrate(connection: Connection, revision: str = "head") -> None:
    """``alembic upgrade`` (to head unless told) inside the caller's transaction; a no-op
    when there already."""
    if connection.dialect.name == "postgresql":
        _require_schema(connection)
        # Two workers starting together would both CREATE TABLE; the second one waits here
        # for the first to commit, then finds the schema at head.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATE_LOCK})
    # A revision this code has no script for was written by a newer release: Alembic could
    # only fail to locate it ("a bug"); the operator's fix is to upgrade this worker.
    current = current_revision(connection)
    if current is not None and not _known(current):
        raise _ahead(current)
    command.upgrade(alembic_config(connection), revision)


def check_schema(connection: Connection) -> None:
    """Raise ``SchemaBehind`` unless the schema is exactly at this code's head."""
    head = head_revision()
    current = current_revision(connection)
    if current is None:
        if connection.dialect.name == "postgresql":
            _require_schema(connection)  # else "run migrate", which cannot create in none
        raise TablesMissing(
            f"ledger schema is at none (no ledger tables), this code needs {head}: "
            "run `decisions migrate`"
        )
    if current != head:
        if not _known(current):
            raise _ahead(current)
        raise SchemaBehind(
            f"ledger schema is at {current}, this code needs {head}: run `decisions migrate`"
        )
    present = set(inspect(connection).get_table_names())
    missing = [name for name in _TABLES if name not in present]
    if missing:
        raise TablesMissing(
            f"ledger schema is at {current} but tables {', '.join(missing)} are missing "
            "(dropped by hand?): restore them or stamp the schema and run `decisions migrate`"
        )


def _require_schema(connection: Connection) -> None:
    """``ConfigurationError`` when no schema the URL's search_path names exists: PostgreSQL
    then has nowhere to create the tables (found by an outside reviewer: a ledger in a
    schema not created yet was told "run `decisions migrate`", and migrate answered "a
    bug", an SQL error of ``alembic_version``, over and over)."""
    if connection.execute(text("SELECT current_schema()")).scalar() is not None:
        return
    path = connection.execute(text("SHOW search_path")).scalar()
    database = connection.execute(text("SELECT current_database()")).scalar()
    raise ConfigurationError(
        f"DECISIONS_LEDGER_URL: no schema of its search_path ({path}) exists in database "
        f"{database}, so the ledger has nowhere to be: create it (CREATE SCHEMA ...) or name "
        "one that exists in the URL's options (-csearch_path=...), then run `decisions migrate`"
    )


def _ahead(current: str) -> SchemaAhead:
    return SchemaAhead(
        f"ledger schema is at {current}, which this code ({head_revision()}) does not know: "
        "it was migrated by a newer release of decision-worker; upgrade this one"
    )


def _known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False
