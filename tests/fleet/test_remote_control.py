"""Celery's remote control against a default ``decisions worker`` (the loop pool): what an
operator gets wrong is answered with what is wrong and what to do, and the worker's log
says it in a line, never with a traceback.

Real parts: a Redis broker, a ``decisions worker`` process (SQLite ledger, the faux in
process) and the ``celery`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import decisions_env, wait_log, worker_process
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 11
CELERY = str(Path(sys.executable).with_name("celery"))
NAME = "remote-control@vm"


def _ask(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [CELERY, "-A", "worker.app", *args, "-d", NAME, "--timeout", "10", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    # ``control`` answers a list of {node: reply}, ``inspect`` one {node: reply}.
    replies = answer if isinstance(answer, list) else [answer]
    return dict(next(reply[NAME] for reply in replies if NAME in reply))


def test_remote_control_mistakes_are_answered_and_logged_in_a_line(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with redis_database(REDIS_DB):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
            max_in_flight="64",
        )
        args = ("--migrate", "--without-mingle", "--without-gossip", f"--hostname={NAME}")
        with worker_process(env, *args, log=log) as proc:
            wait_log(log, "ready.", proc)
            grown = _ask(env, "control", "pool_grow", "2")
            assert "DECISIONS_MAX_IN_FLIGHT (now 64)" in grown["error"], grown
            assert "restart the worker" in grown["error"]
            shrunk = _ask(env, "control", "pool_shrink", "1")
            assert "DECISIONS_MAX_IN_FLIGHT (now 64)" in shrunk["error"], shrunk
            assert "unknown task" in _ask(env, "control", "rate_limit", "no.such", "1/s")["error"]
            assert "SIGNOTASIG" in _ask(env, "control", "terminate", "NOTASIG", "x")["error"]
            # The worker still answers, and its pool is the one asked about.
            stats = _ask(env, "inspect", "stats")
            assert stats["pool"]["max-in-flight"] == 64
    text = log.read_text()
    assert "pidbox command error" in text and "unknown task" in text
    assert "Traceback" not in text, text[-3000:]
