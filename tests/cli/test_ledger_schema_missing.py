"""A PostgreSQL ledger URL whose search_path names a schema that does not exist (found by an
outside reviewer: every command said "run `decisions migrate`", and migrate answered
"unexpected error ... a bug" with an SQL error about ``alembic_version``, so a newcomer went
round in a loop). Each says what is missing and how to make it, and nothing is created."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.cli.support import decisions, traceback_in
from tests.support.services import PG_BASE_URL, postgres_schema

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("command", [("migrate",), ("ledger", "status")])
def test_a_schema_that_does_not_exist_is_named_with_the_fix(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    with postgres_schema("reachable"):  # the server answers (skips, or fails under CI, if not)
        pass
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    url = f"{PG_BASE_URL}?options=-csearch_path%3D{missing}"
    done = decisions(*command, cwd=tmp_path, ledger_url=url)
    assert traceback_in(done.output) is None, done.output
    assert "bug" not in done.output, done.output
    assert done.code == 2, done.output
    said = " ".join(done.stderr.split())
    assert f"no schema of its search_path ({missing}) exists" in said, done.output
    assert "CREATE SCHEMA" in said
    engine = sa.create_engine(PG_BASE_URL)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT count(*) FROM pg_namespace WHERE nspname = :n"), {"n": missing}
            ).scalar()
    finally:
        engine.dispose()
    assert found == 0
