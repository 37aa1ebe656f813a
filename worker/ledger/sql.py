"""The few SQL forms that differ between SQLite and PostgreSQL (the clock: ``clock``)."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

__all__ = ["insert_if_absent", "insert_many_if_absent"]


@cache
def _insert_if_absent(table: Table, dialect: str) -> Any:
    keys = [column.name for column in table.primary_key.columns]
    if dialect == "postgresql":
        stmt: Any = postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
    elif dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
    else:
        raise NotImplementedError(f"the ledger supports SQLite and PostgreSQL, not {dialect}")
    # RETURNING, not rowcount: drivers disagree on rowcount for a skipped conflict, and
    # the winner gets its row without reading it back.
    return stmt.returning(table)


def insert_if_absent(conn: Connection, table: Table, values: dict[str, Any]) -> Row[Any] | None:
    """``INSERT ... ON CONFLICT DO NOTHING`` on the primary key: the new row, or None.

    Both backends resolve a race on the key inside the database: on PostgreSQL the loser
    waits for the winner's commit and then does nothing, on SQLite ``BEGIN IMMEDIATE`` has
    already serialised the writers. Either way only the winner gets a row back.
    """
    return conn.execute(_insert_if_absent(table, conn.dialect.name), values).first()


def insert_many_if_absent(
    conn: Connection, table: Table, rows: list[dict[str, Any]]
) -> list[Row[Any]]:
    """``insert_if_absent`` for many rows in one statement (SQLAlchemy's "insertmanyvalues"):
    the rows it inserted, in no particular order; a row whose key was taken is left out."""
    if not rows:
        return []
    return list(conn.execute(_insert_if_absent(table, conn.dialect.name), rows).all())
