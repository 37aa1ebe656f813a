"""Ctrl-C while ``decisions`` starts: status 130 and nothing printed, as a later Ctrl-C.

Building a command imports its modules, over half a second of CPU (SQLAlchemy, Celery,
pydantic): a SIGINT in that time ended in the traceback of a ``KeyboardInterrupt`` inside an
import (status -2), where one a second later exits 130 quietly (typer's handling).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.support import traceback_in
from tests.support.processes import DECISIONS, decisions_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: What ``decisions`` exits with on Ctrl-C (128 + SIGINT).
INTERRUPTED = 130
#: Nothing listens on port 1: ``status`` reports the servers unreachable and exits 1.
NOWHERE = "redis://127.0.0.1:1/0"
#: A shared library that ``decisions status`` maps while its command is built (shared.settings
#: imports pydantic), and that ``worker.cli`` itself does not import: once the process has
#: it, the signal lands inside ``build``.
BUILDING_MARKER = "_pydantic_core"
#: Of the command's start-up; a loaded machine only makes each land earlier in it.
DELAYS_S = (0.05, 0.1, 0.2, 0.35, 0.5)


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    env = decisions_env(
        redis_url=NOWHERE, broker_url=NOWHERE, ledger_url=f"sqlite:///{tmp_path / 'l.db'}"
    )
    # Started as from a terminal: SIGINT at its default. A shell running a job in the
    # background (``cmd &`` without job control, as CI may) hands it on ignored, and a
    # Python started so never turns Ctrl-C into KeyboardInterrupt: the command runs on.
    default_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return subprocess.Popen(
        [sys.executable, "-c", default_sigint, DECISIONS, "status"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _maps(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


def test_ctrl_c_while_the_command_is_built_exits_130_quietly(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        until = time.monotonic() + 60
        while True:
            maps = _maps(proc.pid)
            if maps is None and proc.poll() is None:
                pytest.skip("no /proc/PID/maps here to tell when the command is being built")
            assert proc.poll() is None, "the command ended before its modules were imported"
            if maps is not None and BUILDING_MARKER in maps:
                break
            assert time.monotonic() < until, f"{BUILDING_MARKER} never loaded"
            time.sleep(0.002)
        code, err = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert traceback_in(err) is None, err
    assert code == INTERRUPTED, err
    assert len([line for line in err.splitlines() if line.strip()]) <= 1, err


def test_ctrl_c_at_any_moment_of_the_start_exits_130_quietly(tmp_path: Path) -> None:
    ours = (str(ROOT / "worker"), str(ROOT / "shared"))
    interrupted = []
    for delay in DELAYS_S:
        proc = _start(tmp_path)
        try:
            time.sleep(delay)
            code, err = _interrupt(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if traceback_in(err) is not None:
            # Only the interpreter's own start (site's .pth files, the console script looking
            # up worker.cli) runs before any code of ours: a traceback there names none of it.
            assert not any(path in err for path in ours), (delay, err)
            continue
        assert code in (INTERRUPTED, -signal.SIGINT, 1), (delay, code, err)
        if code == INTERRUPTED:
            interrupted.append(delay)
    # Not all of them fell before Python's handler or after the command ended.
    assert interrupted, "no Ctrl-C landed while the command started"
