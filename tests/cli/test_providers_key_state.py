"""``decisions providers`` says why a key that is set cannot be used, never the key (found by
an attack: ``PARALLEL_API_KEY='pk X'`` showed "key set: no" for a variable the operator had
set, while the job's escalation named the space)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import decisions, traceback_in

KEY = "pk SECRETKEY2"


def test_a_set_but_unusable_key_is_named_with_why(tmp_path: Path) -> None:
    done = decisions("providers", cwd=tmp_path, env={"PARALLEL_API_KEY": KEY})
    assert traceback_in(done.output) is None and done.code == 0, done.output
    assert "SECRETKEY2" not in done.output
    row = [line for line in done.stdout.splitlines() if "PARALLEL_API_KEY holds" in line]
    assert len(row) == 1 and "key set" in row[0] and "no: PARALLEL_API_KEY holds a space" in row[0]
    as_json = decisions("providers", "--json", cwd=tmp_path, env={"PARALLEL_API_KEY": KEY})
    rows = {row["name"]: row for row in json.loads(as_json.stdout)}
    assert rows["parallel"]["key_set"] is False
    assert "holds a space or a tab" in rows["parallel"]["key_problem"]
    assert rows["openrouter"]["key_problem"] == "OPENROUTER_API_KEY is not set"
    assert "SECRETKEY2" not in as_json.output
