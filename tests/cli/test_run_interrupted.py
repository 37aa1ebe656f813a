"""Ctrl-C during ``decisions run`` says how many jobs finished and that running the same file
again goes on (found by an attack: it exited 130 with no word). A real ``decisions run``
process, sent SIGINT as from a terminal once its ledger file is there."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.cli.test_submit_interrupted import sigint_when
from tests.support.processes import DECISIONS, decisions_env

SAID = re.compile(r"interrupted: (\d+) of (\d+) job\(s\) finished, nothing written to out")


def test_ctrl_c_during_a_run_says_what_finished_and_how_to_go_on(tmp_path: Path) -> None:
    batch = tmp_path / "big.jsonl"
    batch.write_text(
        "".join(
            json.dumps({"id": f"j-{n}", "state": f"ticket {n}",
                        "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}}) + "\n"
            for n in range(3000)
        )
    )  # fmt: skip
    ledger = tmp_path / "decisions.db"
    env = decisions_env(ledger_url=f"sqlite:///{ledger}")
    started: list[float] = []

    def ready(_pid: int) -> bool:
        if not ledger.exists():
            return False
        started.append(time.monotonic())
        return started[-1] - started[0] > 1.0  # jobs are running by then

    done = sigint_when([DECISIONS, "run", str(batch)], env, ready)
    if done.returncode == 0:
        pytest.skip("the run ended before the Ctrl-C reached it")
    assert done.returncode == 130, done.stderr
    said = SAID.search(done.stderr)
    assert said is not None, done.stderr
    assert int(said[2]) == 3000 and int(said[1]) < 3000
    assert "running the same file again goes on" in done.stderr
    assert "Traceback" not in done.stderr
