"""A ``.env`` that is not UTF-8 is named with the fix for a settings file, not for a file of
jobs (found by an attack: "save the file as UTF-8 (each line one JSON job)")."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import decisions, traceback_in


def test_a_dotenv_that_is_not_utf8_gets_a_settings_files_advice(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"DECISIONS_LOG_LEVEL=INFO\n# caf\xe9\n")
    done = decisions("providers", cwd=tmp_path)
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert ".env line 2" in lines[0] and "0xe9" in lines[0], done.stderr
    assert "JSON job" not in done.stderr and "NAME=value" in lines[1], done.stderr

