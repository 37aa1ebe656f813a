"""A ledger without its tables is named with the fix once (found by an attack: the problem
line ended "run `decisions migrate`" and the fix line began "a new ledger: run `decisions
migrate`", two sentences run together)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import decisions, traceback_in


def test_a_ledger_without_tables_is_told_the_fix_once(tmp_path: Path) -> None:
    done = decisions("ledger", "status", cwd=tmp_path, ledger_url="sqlite:///none.db")
    assert traceback_in(done.output) is None and done.code == 2, done.output
    assert done.stderr.count("decisions migrate") == 1, done.stderr
    assert "has no tables" in done.stderr and "restore them from a backup" in done.stderr
