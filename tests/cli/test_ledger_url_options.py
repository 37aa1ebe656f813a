"""A ledger URL whose libpq connection option is wrong is named with its fix, exit 2 (found
by an attack: ``?sslmode=bogus`` was "cannot be reached ... start the database", exit 1, and
``?connect_timeout=abc`` or an unknown option "unexpected error: ProgrammingError ... a
bug"). The database runs: the URL is what to mend."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import decisions, traceback_in
from tests.support.services import postgres_schema


@pytest.mark.parametrize(
    ("option", "named"),
    [("sslmode=bogus", "sslmode"), ("connect_timeout=abc", "connect_timeout"),
     ("nosuchopt=1", "nosuchopt")],
)  # fmt: skip
def test_a_wrong_connection_option_is_named_with_its_fix(
    tmp_path: Path, option: str, named: str
) -> None:
    with postgres_schema("url_options") as base:  # a database that answers
        url = f"{base}{'&' if '?' in base else '?'}{option}"
        done = decisions("ledger", "status", cwd=tmp_path, ledger_url=url)
    assert traceback_in(done.output) is None, done.output
    assert "unexpected error" not in done.output and "start the database" not in done.output
    assert done.code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and named in lines[0], done.stderr
    assert "DECISIONS_LEDGER_URL" in lines[1] and "option" in lines[1], done.stderr
