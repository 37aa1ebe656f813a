"""Liveness through real ``decisions worker`` processes (threads and prefork pools): a handler
raising ``SystemExit`` is a handler error and the worker goes on (later jobs answered, warm
shutdown prompt); a loop that dies anyway ends the process, so its supervisor restarts it.

On the landed code the ``SystemExit`` killed the loop thread: with the threads pool the later
jobs were never answered, /healthz said 200 and a warm shutdown hung; with prefork one pool
process was stuck for good."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.client import Client
from shared.replies import EscalationMessage, ResultMessage
from shared.settings import Settings
from tests.menus_worker.support import OPTIONS, menu_job
from tests.support.processes import DECISIONS, decisions_env, faux_server, wait_log
from tests.support.services import free_port, postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 6
STREAM = "liveness-it:replies"
ROOT = Path(__file__).parents[2]
EXIT = [*OPTIONS, {"kind": "handler", "name": "bye", "handler": "t_live_exit"}]
KILL = [*OPTIONS, {"kind": "handler", "name": "bye", "handler": "t_live_kill_loop"}]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with (
        redis_database(REDIS_DB),
        postgres_schema("liveness") as ledger_url,
        faux_server(log=tmp_path / "faux.log") as faux_url,
    ):
        port = free_port()
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            handlers="tests.menus_worker.handlers,tests.menus_worker.liveness_handlers",
            metrics_port=str(port),
            metrics_addr="127.0.0.1",
            worker_concurrency="2",
            reaper_interval_s="0",
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        settings = Settings(
            _env_file=None,
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
        )
        yield {"env": env, "faux": faux_url, "port": port, "settings": settings, "logs": tmp_path}


def start(parts: dict[str, Any], pool: str) -> tuple[subprocess.Popen[bytes], Path]:
    log: Path = parts["logs"] / f"worker-{pool}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                DECISIONS,
                "worker",
                "--migrate",
                f"--pool={pool}",
                "--without-mingle",
                "--without-gossip",
            ],
            env=parts["env"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_log(log, "ready.", proc)
    return proc, log


def script(parts: dict[str, Any], picks: dict[str, dict[str, Any]]) -> None:
    answer = httpx.put(f"{parts['faux']}/_faux/chat", json={"by_call": picks}, timeout=5)
    assert answer.status_code == 200


def health(parts: dict[str, Any], path: str) -> int:
    return httpx.get(f"http://127.0.0.1:{parts['port']}{path}", timeout=5).status_code


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_handler_raising_system_exit_leaves_the_worker_working(
    parts: dict[str, Any], pool: str
) -> None:
    proc, log = start(parts, pool)
    try:
        exit_id = f"bye-{pool}"
        later = [f"later-{pool}-{i}" for i in range(4)]
        script(
            parts,
            {
                f"{exit_id}/pick.0": {"pick": "bye", "args": {"code": 3}},
                **{f"{j}/pick.0": {"pick": "close"} for j in later},
            },
        )
        client = Client(parts["settings"])
        first = client.submit(menu_job(exit_id, options=EXIT), reply_to=STREAM)
        [bye] = list(client.replies(STREAM, job_ids=first.job_ids, timeout_s=60))
        assert isinstance(bye, EscalationMessage) and bye.reason == "handler_failed"
        assert "SystemExit" in bye.detail
        # More jobs than pool slots: every slot still runs jobs.
        report = client.submit_batch([menu_job(j) for j in later], reply_to=STREAM, chunk_size=1)
        replies = list(client.replies(STREAM, job_ids=report.job_ids, timeout_s=60))
        assert sorted(r.job_id for r in replies) == sorted(later)
        assert all(isinstance(r, ResultMessage) for r in replies)
        assert health(parts, "/healthz") == 200 and health(parts, "/readyz") == 200
        # A warm shutdown ends promptly.
        began = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert time.monotonic() - began < 30
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_a_loop_that_dies_anyway_ends_the_worker_process(parts: dict[str, Any]) -> None:
    proc, log = start(parts, "threads")
    try:
        script(parts, {"kill-loop/pick.0": {"pick": "bye", "args": {"reason": "test"}}})
        client = Client(parts["settings"])
        client.submit(menu_job("kill-loop", options=KILL), reply_to=STREAM)
        # Not a worker that takes messages and runs nothing: it exits, for its supervisor.
        assert proc.wait(timeout=60) == 70, log.read_text()[-3000:]
        text = log.read_text()
        assert "worker.vital_part_died" in text and "decisions-loop" in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
