"""Alembic environment of the ledger.

``Ledger.migrate()`` runs it on the Ledger's own connection, already inside one transaction
(``config.attributes["connection"]``): the whole upgrade commits or rolls back as one, and
the version table lands where the tables do (the connection's search_path on PostgreSQL).
Given only a URL (``sqlalchemy.url``), it opens an engine of its own with the same SQLite
settings as the Ledger.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from worker.ledger.engine import make_engine
from worker.ledger.models import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        # Our SQLite engine begins its own transactions, so DDL there is transactional too.
        transactional_ddl=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("ledger migrations need a connection or sqlalchemy.url")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    _run_online()
