"""On a terminal a worker's log is for people (Celery's banner, console lines); piped to a file
or a log shipper it is JSON, one event per line (the observability tests read that one)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fleet.support import flushed
from tests.support.ownservers import OwnRedis
from tests.support.processes import DECISIONS, decisions_env

pytestmark = pytest.mark.integration


def read_until(fd: int, needle: bytes, proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    seen = b""
    until = time.monotonic() + timeout_s
    while needle not in seen:
        if time.monotonic() > until or proc.poll() is not None:
            raise AssertionError(f"{needle!r} not seen; the terminal showed:\n{seen.decode()}")
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_a_worker_on_a_terminal_writes_console_lines(
    tmp_path: Path, redis_server: OwnRedis
) -> None:
    with flushed(redis_server) as (_r, url):
        env = decisions_env(
            broker_url=url,
            redis_url=url,
            ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        )
        main, child = pty.openpty()
        proc = subprocess.Popen(
            [DECISIONS, "worker", "--migrate", "--without-mingle", "--without-gossip"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=child,
            stderr=child,
            start_new_session=True,
        )
        os.close(child)
        try:
            shown = read_until(main, b"ready.", proc, 60).decode(errors="replace")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            os.close(main)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert "[tasks]" in shown and "decisions.run_jobs" in shown  # Celery's banner
    assert any("worker.ready" in line for line in lines)
    for line in lines:
        with pytest.raises(ValueError):
            json.loads(line)
