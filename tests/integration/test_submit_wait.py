"""``decisions submit --wait`` without ``--timeout`` never waits forever: past the time by which
every job should have replied (its deadline and lease margin, or the visibility timeout after
which a reaper republishes what the broker lost), it names the jobs still missing, says what to
do, and exits 1. On the landed code it waited forever."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import DECISIONS, decisions_env
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 5


def test_submit_wait_without_a_worker_reports_the_missing_jobs(tmp_path: Path) -> None:
    lines = tmp_path / "jobs.jsonl"
    jobs = [
        {
            "id": f"never-{i}",
            "kind": "decide",
            "state": "s",
            "questions": {"q": {"type": "noul", "instructions": "Is it urgent?"}},
        }
        for i in range(3)
    ]
    lines.write_text("".join(json.dumps(job) + "\n" for job in jobs))
    with redis_database(REDIS_DB):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
            default_timeout_s="2",
            deadline_ceiling_s="2",
            lease_margin_s="0.5",
            visibility_timeout_s="4",
            reaper_interval_s="1",
        )
        began = time.monotonic()
        done = subprocess.run(
            [DECISIONS, "submit", str(lines), "--reply-to", "never:replies", "--wait"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # the landed code never returned
        )
        waited = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "3 job(s) still without a reply" in err
    assert all(f"never-{i}" in err for i in range(3))
    assert "decisions status" in err and "Traceback" not in done.stderr
    assert waited < 60
