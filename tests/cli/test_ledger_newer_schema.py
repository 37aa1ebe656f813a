"""A ledger migrated by a newer release (its alembic_version holds a revision this code has no
script for): ``decisions migrate``, ``decisions worker`` (with or without --migrate) and the
ledger commands say so and the fix, exit 2, on SQLite and PostgreSQL. Before, Alembic's
"Can't locate revision identified by '0099'" was explained as a bug in decisions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.cli.support import decisions, traceback_in
from tests.support.services import postgres_schema
from worker.ledger import head_revision

pytestmark = pytest.mark.integration

#: Nothing listens on port 1: a worker that got past the ledger would fail on Redis.
NOWHERE = "redis://127.0.0.1:1/0"
AHEAD = "0099"


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    with postgres_schema("ahead") as url:  # skips (or fails under CI) without PostgreSQL
        yield url


@pytest.mark.parametrize(
    "args",
    [
        ("migrate",),
        ("worker", "--migrate"),
        ("worker",),
        ("ledger", "status"),
        ("budget", "show", "b"),
    ],
    ids=" ".join,
)
def test_a_schema_migrated_by_a_newer_release_is_named_with_the_fix(
    ledger_url: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    first = decisions("migrate", cwd=tmp_path, ledger_url=ledger_url)
    assert first.code == 0, first.output
    engine = sa.create_engine(ledger_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE alembic_version SET version_num = '{AHEAD}'"))
    finally:
        engine.dispose()

    done = decisions(
        *args, cwd=tmp_path, ledger_url=ledger_url, redis_url=NOWHERE, broker_url=NOWHERE
    )

    assert traceback_in(done.output) is None, done.output
    # A configuration's exit (README, Upgrading: "exits 2 and names the revision"), found
    # by an attack to be 1 on every command.
    assert done.code == 2, done.output
    assert (
        f"ledger schema is at {AHEAD}, which this code ({head_revision()}) does not know: "
        "it was migrated by a newer release of decision-worker; upgrade this one"
    ) in done.stderr, done.stderr
    assert "bug" not in done.output and "unexpected" not in done.output, done.output
    assert 1 <= len([line for line in done.stderr.splitlines() if line.strip()]) <= 2
