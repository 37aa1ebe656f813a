"""The few SQL forms that differ between SQLite and PostgreSQL, and the ledger's clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

__all__ = ["insert_if_absent", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def insert_if_absent(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """``INSERT ... ON CONFLICT DO NOTHING`` on the primary key; True if this call inserted.

    Both backends resolve a race on the key inside the database: on PostgreSQL the loser
    waits for the winner's commit and then does nothing, on SQLite ``BEGIN IMMEDIATE`` has
    already serialised the writers. Either way the row count says who won.
    """
    keys = [column.name for column in table.primary_key.columns]
    name = conn.dialect.name
    if name == "postgresql":
        stmt: Any = (
            postgresql.insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
        )
    elif name == "sqlite":
        stmt = sqlite.insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
    else:
        raise NotImplementedError(f"the ledger supports SQLite and PostgreSQL, not {name}")
    return bool(conn.execute(stmt).rowcount == 1)
