"""Ctrl-C during ``decisions submit`` says how many jobs went (found by an attack: a Ctrl-C
during a 100,000-job submit exited 130 with no word, 208 messages on the queue at the signal
and 224 after it). The count is what the broker holds: the publishing thread finishes what
it was handed before the command stops, and says so through ``on_progress``.

A real redis-server of the test's own (the broker) and a real ``decisions submit`` process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared import keys
from tests.support.ownservers import own_redis
from tests.support.processes import DECISIONS, decisions_env

SAID = re.compile(r"interrupted: (\d+) of (\d+) job\(s\) queued")


def interrupted_submit(tmp_path: Path, jobs: int, at: int) -> tuple[int, str, int]:
    """``decisions submit`` of ``jobs`` jobs, one a message, sent SIGINT once the broker holds
    ``at`` messages: its exit status, its stderr, and what the broker holds after."""
    batch = _batch(tmp_path / "big.jsonl", jobs)
    done, held = _interrupted(
        tmp_path, [str(batch), "--reply-to", "big", "--chunk-size", "1"],
        lambda r, _pid: r.llen(keys.CELERY_QUEUE) >= at,
    )
    return done.returncode, done.stderr, held


def _interrupted(
    tmp_path: Path, args: list[str], ready: Callable[[redis.Redis, int], bool]
) -> tuple[subprocess.CompletedProcess[str], int]:
    """``decisions submit ARGS`` on a broker of its own, sent SIGINT once ``ready(broker,
    pid)``: how it ended, and how many messages the broker holds after."""
    with own_redis(persist=False) as server:
        env = decisions_env(
            broker_url=server.url(), redis_url=server.url(),
            ledger_url=f"sqlite:///{tmp_path}/ledger.db",
        )
        r = redis.Redis.from_url(server.url())
        done = sigint_when([DECISIONS, "submit", *args], env, lambda pid: ready(r, pid))
        return done, r.llen(keys.CELERY_QUEUE)


def test_ctrl_c_during_a_submit_says_how_many_jobs_were_queued(tmp_path: Path) -> None:
    code, err, queued = interrupted_submit(tmp_path, 20_000, at=200)
    assert code == 130, err
    said = SAID.search(err)
    assert said is not None, err
    assert (int(said[1]), int(said[2])) == (queued, 20_000)
    assert 200 <= queued < 20_000
    assert "submitting the same file again is safe" in err
    assert "Traceback" not in err


def test_ctrl_c_during_the_last_messages_says_what_the_broker_holds(tmp_path: Path) -> None:
    """Found by an attack: a Ctrl-C once every job was handed to the publishing thread
    interrupted the wait for it, and the count was read while it still sent up to 16
    messages ("3989 of 4000 queued", 3992 on the broker). A second wait on the thread after
    the interrupt (``Thread.join``) returned at once: CPython marks an interrupted join's
    thread stopped while it runs on."""
    code, err, queued = interrupted_submit(tmp_path, 4000, at=4000 - 12)
    said = SAID.search(err)
    if said is None and code == 0:
        pytest.skip("the submit ended before the Ctrl-C reached it")
    assert said is not None, err
    assert int(said[1]) == queued, f"said {said[1]}, the broker holds {queued}"


def sigint_when(
    argv: list[str], env: dict[str, str], ready: Callable[[int], bool]
) -> subprocess.CompletedProcess[str]:
    """``argv`` run as from a terminal, sent SIGINT once ``ready(pid)`` (unless it ended
    before)."""
    run = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a shell running the suite in the background ignores SIGINT,
        # its children inherit that, and Python then never raises KeyboardInterrupt (the
        # fresh-clone CI of 0cab8ac ran so: the submit ran to its end).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        until = time.monotonic() + 60
        while run.poll() is None and not ready(run.pid):
            assert time.monotonic() < until, "never ready for the Ctrl-C"
            time.sleep(0.0005)
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    return subprocess.CompletedProcess(argv, run.returncode, out, err)


def _holds_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _batch(path: Path, jobs: int) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"j-{n}", "state": f"ticket {n}",
                        "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}}) + "\n"
            for n in range(jobs)
        )
    )
    return path


def test_ctrl_c_while_the_file_is_read_says_nothing_was_queued(tmp_path: Path) -> None:
    """It exited 130 with no word: the user had to look at the queue to know."""
    batch = _batch(tmp_path / "big.jsonl", 300_000)
    done, held = _interrupted(
        tmp_path, [str(batch), "--reply-to", "big"], lambda _r, pid: _holds_open(pid, batch)
    )
    assert done.returncode == 130, done.stderr
    assert f"interrupted while reading {batch}: nothing was queued" in done.stderr
    assert held == 0
    assert "Traceback" not in done.stderr


def test_ctrl_c_while_waiting_for_replies_says_the_jobs_stay_queued(tmp_path: Path) -> None:
    """It exited 130 with no word, as if the Ctrl-C had stopped the jobs: they are queued,
    and a worker answers them whatever the wait does."""
    batch = _batch(tmp_path / "few.jsonl", 3)
    done, held = _interrupted(
        tmp_path, [str(batch), "--reply-to", "few", "--wait"],
        # Queued, and the command is reading the reply stream (no worker runs).
        lambda r, _pid: r.llen(keys.CELERY_QUEUE) == 1 and _reading(r),
    )
    assert done.returncode == 130, done.stderr
    assert "stopped waiting: 0 of 3 job(s) have replied" in done.stderr
    assert "read every reply with: decisions results few" in done.stderr
    assert held == 1  # still there for a worker
    assert "Traceback" not in done.stderr


def _reading(r: redis.Redis) -> bool:
    """Whether a client of this Redis is blocked reading a stream."""
    return any(c.get("cmd") == "xread" for c in r.client_list())
