"""Schema versions: check_schema, idempotent and concurrent migrate, models == migration."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from shared.errors import LedgerError, SchemaBehind
from worker.ledger import Ledger, current_revision, head_revision, schema
from worker.ledger.models import metadata


def test_head_revision() -> None:
    assert head_revision() == "0007"
    assert Ledger.head_revision() == "0007"


def test_check_schema_on_an_empty_database(empty_ledger: Ledger) -> None:
    with pytest.raises(SchemaBehind) as caught:
        empty_ledger.check_schema()
    assert str(caught.value) == (
        "ledger schema is at none (no ledger tables), this code needs 0007: run `decisions migrate`"
    )


def test_using_an_unmigrated_ledger_says_migrate(empty_ledger: Ledger) -> None:
    with pytest.raises(SchemaBehind, match="decisions migrate"):
        empty_ledger.get_job("j")


def test_migrate_is_idempotent(empty_ledger: Ledger, ledger_url: str) -> None:
    assert current_revision(ledger_url) is None
    empty_ledger.migrate()
    empty_ledger.migrate()
    empty_ledger.check_schema()
    assert empty_ledger.current_revision() == "0007"
    assert current_revision(ledger_url) == "0007"
    assert current_revision(empty_ledger.engine) == "0007"
    tables = set(inspect(empty_ledger.engine).get_table_names())
    assert {"jobs", "calls", "alembic_version"} <= tables


def test_concurrent_migrations(ledger_url: str) -> None:
    ledgers = [Ledger(ledger_url) for _ in range(4)]
    barrier = threading.Barrier(len(ledgers))
    errors: list[BaseException] = []

    def run(ledger: Ledger) -> None:
        try:
            barrier.wait()
            ledger.migrate()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(lg,)) for lg in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        ledgers[0].check_schema()
    finally:
        for lg in ledgers:
            lg.dispose()


def test_a_sqlite_migration_that_meets_a_lock_past_the_busy_timeout_waits_its_turn(
    tmp_path: Path,
) -> None:
    # Workers started together with --migrate on a loaded machine: one migration held the
    # write lock past another's busy timeout, which failed with "database is locked".
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held 1 s: past the 0.2 s below
    release = threading.Timer(1.0, holder.execute, args=("COMMIT",))
    release.start()
    ledger = Ledger(url, busy_timeout_s=0.2)
    try:
        ledger.migrate()
        ledger.check_schema()
    finally:
        release.join()
        holder.close()
        ledger.dispose()


def test_schema_behind(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "head_revision", lambda: "0008")
    with pytest.raises(SchemaBehind) as caught:
        ledger.check_schema()
    assert str(caught.value) == (
        "ledger schema is at 0007, this code needs 0008: run `decisions migrate`"
    )


def test_schema_ahead(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(LedgerError, match="newer release") as caught:
        ledger.check_schema()
    assert not isinstance(caught.value, SchemaBehind)


def test_migrate_refuses_a_schema_ahead(ledger: Ledger) -> None:
    # Alembic could only fail to locate the revision ("Can't locate revision identified by
    # '0099'", which `decisions migrate` explained as a bug): said as check_schema says it.
    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(LedgerError) as caught:
        ledger.migrate()
    assert str(caught.value) == (
        f"ledger schema is at 0099, which this code ({head_revision()}) does not know: "
        "it was migrated by a newer release of decision-worker; upgrade this one"
    )
    assert not isinstance(caught.value, SchemaBehind)
    assert ledger.current_revision() == "0099"


def test_tables_dropped_by_hand(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(text("DROP TABLE calls"))
    with pytest.raises(SchemaBehind, match="calls are missing"):
        ledger.check_schema()


def test_migration_matches_the_models(ledger: Ledger) -> None:
    with ledger.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


@pytest.mark.integration
def test_postgres_version_table_lives_in_the_test_schema(
    pg_schema: str, pg_url: Callable[..., str], pg_admin: Callable[[str], object]
) -> None:
    ledger = Ledger(pg_url())
    try:
        ledger.migrate()
        rows = pg_admin(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_name IN ('jobs', 'calls', 'alembic_version') "
            f"AND table_schema = '{pg_schema}' ORDER BY table_name"
        )
        assert rows == [(pg_schema, "alembic_version"), (pg_schema, "calls"), (pg_schema, "jobs")]
    finally:
        ledger.dispose()
