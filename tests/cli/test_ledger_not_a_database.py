"""A SQLite ledger URL naming a file that is not a database (a text file, say): every command
that opens the ledger names DECISIONS_LEDGER_URL, the file and the fix, with no traceback and
no "bug". Before, SQLite's "file is not a database" (a plain DatabaseError, which the ledger
translated into no error of its own) was "unexpected error: ... this is a bug in decisions".

Only SQLite's verdict on the file is translated: any other DatabaseError stays a bug to see.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import exc

from shared.errors import ConfigurationError, LedgerError
from tests.cli.support import KEY_VARIABLES, Outcome, decisions, traceback_in
from tests.support.processes import DECISIONS, decisions_env
from worker.ledger.engine import translate_error

pytestmark = pytest.mark.integration

#: Celery's own command, as an operator may start the worker: `celery -A worker.app worker`.
CELERY = str(Path(DECISIONS).with_name("celery"))
#: Nothing listens on port 1: the servers besides the ledger are unreachable.
NOWHERE = "redis://127.0.0.1:1/0"
FIX = "point DECISIONS_LEDGER_URL at a ledger file, or at a new path"


@pytest.fixture
def not_a_database(tmp_path: Path) -> Path:
    path = tmp_path / "notadb.txt"
    path.write_text("hello\n")
    return path


def _says_not_a_database(text: str, path: Path) -> None:
    assert (
        f"DECISIONS_LEDGER_URL=sqlite:///{path} names a file that is not a SQLite database"
    ) in text, text
    assert FIX in text, text
    assert "bug" not in text and "unexpected" not in text, text


def _explained(done: Outcome, path: Path) -> None:
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    _says_not_a_database(done.stderr, path)
    lines = [line for line in done.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert 1 <= len(lines) <= 2, done.stderr


@pytest.mark.parametrize("args", [("migrate",), ("worker",), ("worker", "--migrate")], ids=" ".join)
def test_a_command_on_a_file_that_is_no_database_names_it_and_the_fix(
    args: tuple[str, ...], not_a_database: Path, tmp_path: Path
) -> None:
    done = decisions(
        *args,
        cwd=tmp_path,
        timeout_s=60,
        ledger_url=f"sqlite:///{not_a_database}",
        redis_url=NOWHERE,
        broker_url=NOWHERE,
    )
    _explained(done, not_a_database)
    assert not_a_database.read_text() == "hello\n"  # left as it was


def test_a_relative_url_names_the_file_it_means(not_a_database: Path, tmp_path: Path) -> None:
    done = decisions(
        "migrate", cwd=tmp_path, timeout_s=60, ledger_url=f"sqlite:///{not_a_database.name}"
    )
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    assert (
        f"DECISIONS_LEDGER_URL=sqlite:///{not_a_database.name} names a file that is not a "
        f"SQLite database ({not_a_database})"
    ) in done.stderr, done.stderr
    assert FIX in done.stderr and "bug" not in done.output


def test_status_on_a_file_that_is_no_database_names_it_and_the_fix(
    not_a_database: Path, tmp_path: Path
) -> None:
    # status reports each source it cannot read, and exits 1 (JSON: nothing folded).
    done = decisions(
        "status",
        "--json",
        cwd=tmp_path,
        timeout_s=60,
        ledger_url=f"sqlite:///{not_a_database}",
        redis_url=NOWHERE,
        broker_url=NOWHERE,
    )
    assert traceback_in(done.output) is None, done.output
    assert done.code == 1, done.output
    _says_not_a_database(json.loads(done.stdout)["unreachable"]["ledger"], not_a_database)


def test_celery_itself_on_a_file_that_is_no_database_names_it_and_the_fix(
    not_a_database: Path, tmp_path: Path
) -> None:
    env = decisions_env(
        ledger_url=f"sqlite:///{not_a_database}", redis_url=NOWHERE, broker_url=NOWHERE
    )
    for name in KEY_VARIABLES:
        env.pop(name, None)
    run = subprocess.run(
        [CELERY, "-A", "worker.app", "worker"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    done = Outcome(run.returncode, run.stdout, run.stderr)
    _explained(done, not_a_database)
    assert "refusing to start" in done.stderr


def _database_error(message: str) -> exc.DatabaseError:
    return exc.DatabaseError("PRAGMA journal_mode = WAL", {}, sqlite3.DatabaseError(message))


@pytest.mark.parametrize(
    "message", ["file is not a database", "file is encrypted or is not a database"]
)
def test_sqlite_saying_the_file_is_no_database_is_a_setting_to_fix(message: str) -> None:
    translated = translate_error(_database_error(message), "sqlite:////srv/ledger.txt")
    # A ledger error (its callers' except clauses see it) that no retry mends: a setting.
    assert isinstance(translated, LedgerError) and isinstance(translated, ConfigurationError)
    assert str(translated).startswith(
        "DECISIONS_LEDGER_URL=sqlite:////srv/ledger.txt names a file that is not a SQLite "
        "database; point DECISIONS_LEDGER_URL"
    )


def test_other_database_errors_stay_bugs() -> None:
    # A corrupt page, or a statement of ours SQLite refuses: nothing an operator's setting
    # caused, so nothing to disguise as one.
    corrupt = _database_error("database disk image is malformed")
    assert translate_error(corrupt, "sqlite:////srv/ledger.db") is None
    # The same words from another database are none of SQLite's verdicts on a file.
    elsewhere = _database_error("file is not a database")
    assert translate_error(elsewhere, "postgresql+psycopg://u@127.0.0.1/db") is None
