"""``decisions run`` on a SQLite ledger it cannot write: a read-only file or directory, a full
disk. Every job's task retried for ever, in silence (only ``-v`` showed why) and the run
looked hung; now it stops at the first such retry, one line naming the file and what is
wrong with it, and a non-zero status (nothing was sent for a job the ledger could not
record, so the same batch can run again once the file is writable).

Read-only is made three ways that also hold for root (for whom ``chmod`` stops nothing):
the ledger opened ``?mode=ro`` (everywhere), and, where the system lets a test make a mount
namespace of its own (``unshare``), the ledger's directory bound read-only and a ledger on a
tmpfs that is full.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from celery import signals
from celery.exceptions import Retry

from shared.settings import get_settings
from tests.cli.support import KEY_VARIABLES, Outcome, decisions, traceback_in
from tests.support.processes import DECISIONS, decisions_env
from worker.cli.run import LedgerRetries
from worker.ledger import LedgerUnavailable
from worker.ledger.errors import TablesMissing

ROOT = Path(__file__).resolve().parents[2]
#: Ends a run that hangs, well before the test's own timeout (the run takes seconds).
RUN_TIMEOUT_S = 90


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    lines = (ROOT / "examples" / "tickets.jsonl").read_text().splitlines()
    (tmp_path / "first.jsonl").write_text(lines[0] + "\n")
    (tmp_path / "next.jsonl").write_text("\n".join(lines[1:4]) + "\n")
    (tmp_path / "ledger").mkdir()
    return tmp_path


def _explained(done: Outcome, code: int, *says: str) -> str:
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert "this is a bug" not in done.output
    explanation = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(explanation) <= 2, done.stderr[-1500:]
    for text in says:
        assert text in explanation[0], (text, done.stderr)
    assert done.code == code, done.output[-1500:]
    return explanation[0]


def test_a_ledger_opened_read_only_stops_the_run(workdir: Path) -> None:
    path = workdir / "ledger" / "decisions.db"
    assert decisions("migrate", cwd=workdir, ledger_url=f"sqlite:///{path}").code == 0
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    done = decisions(
        "run", "next.jsonl", cwd=workdir, ledger_url=read_only, timeout_s=RUN_TIMEOUT_S
    )
    _explained(done, 2, f"the ledger at {path} is read-only", "mode=ro")
    assert not (workdir / "out").exists()


def _in_own_mounts(
    workdir: Path, ledger: Path, *, before: str, after: str, batch: str = "next.jsonl"
) -> Outcome:
    """In a mount namespace of its own: ``before`` (shell), the ledger at ``ledger`` migrated
    and ``first.jsonl`` run on it, then ``after``, then ``decisions run`` of ``batch``."""
    env = decisions_env(ledger_url=f"sqlite:///{ledger}")
    for name in KEY_VARIABLES:
        env.pop(name, None)
    env["COLUMNS"] = "200"
    command = shlex.quote(DECISIONS)
    quiet = ">/dev/null 2>&1"
    script = "\n".join(
        [
            "set -e",
            before,
            f"{command} migrate {quiet}",
            f"{command} run first.jsonl --out out-first {quiet}",
            after,
            f"exec {command} run {batch} --out out-next",
        ]
    )
    done = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S + 60,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def _own_mounts_or_skip() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    done = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "true"], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"no mount namespace for a test here: {done.stderr.decode().strip()}")


def test_a_ledger_on_a_read_only_file_system_stops_the_run(workdir: Path) -> None:
    _own_mounts_or_skip()
    directory = shlex.quote(str(workdir / "ledger"))
    ledger = workdir / "ledger" / "decisions.db"
    bind = f"mount --bind -o ro {directory} {directory}"
    done = _in_own_mounts(workdir, ledger, before="true", after=bind)
    _explained(done, 2, f"the ledger at {ledger} is read-only", "mounted read-only")
    assert not (workdir / "out-next").exists()


def test_a_ledger_on_a_full_disk_stops_the_run(workdir: Path) -> None:
    _own_mounts_or_skip()
    directory = shlex.quote(str(workdir / "ledger"))
    ledger = workdir / "ledger" / "decisions.db"
    done = _in_own_mounts(
        workdir,
        ledger,
        before=f"mount -t tmpfs -o size=2m tmpfs {directory}",
        # What the first batch left room for, taken: the next one's rows do not fit.
        after=f"head -c 4194304 /dev/zero > {directory}/filler 2>/dev/null || true",
    )
    _explained(done, 1, f"the ledger at {ledger}", "disk is full")
    assert not (workdir / "out-next").exists()


def test_a_disk_that_fills_during_the_run_stops_it(workdir: Path) -> None:
    """Found by an attack: a disk that filled once jobs had answers to record never ended
    the run. A job holding an answer waits out a ledger outage inside its task (it must not
    lose what it paid for), so no task retried and nothing stopped; 1,066 log lines in 150 s.
    Now the held write's failure stops the run as a retry's does, and the run does not wait
    for those jobs (what they hold was claimed first: the next run books it)."""
    _own_mounts_or_skip()
    shutil.copy(ROOT / "examples" / "tickets.jsonl", workdir / "all.jsonl")
    directory = shlex.quote(str(workdir / "ledger"))
    ledger = workdir / "ledger" / "decisions.db"
    done = _in_own_mounts(
        workdir,
        ledger,
        # Room for the schema and a few dozen jobs: it fills while the batch runs.
        before=f"mount -t tmpfs -o size=400k tmpfs {directory}",
        after="true",
        batch="all.jsonl",
    )
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 1, done.output[-1500:]
    assert f"the ledger at {ledger} cannot be written: its disk is full" in done.stderr


def _retried(error: BaseException) -> None:
    """The embedded worker's task retrying for ``error``, as Celery signals it."""
    signals.task_retry.send(sender=None, request=None, reason=Retry(exc=error), einfo=None)


def test_a_ledger_error_that_may_pass_is_said_once_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "decisions.db"
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///{ledger}")
    get_settings.cache_clear()
    locked = f"ledger unavailable at sqlite:///{ledger}: OperationalError: database is locked"
    try:
        with LedgerRetries() as retries:
            for _ in range(3):
                _retried(LedgerUnavailable(locked))
                retries.check()  # another process's lock passes: no stop
            read_only = locked.replace("database is locked", "attempt to write a readonly database")
            _retried(LedgerUnavailable(read_only))
            with pytest.raises(LedgerUnavailable, match="readonly"):
                retries.check()
    finally:
        get_settings.cache_clear()
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert said == [
        f"the ledger at {ledger} stayed locked by another process past "
        "DECISIONS_SQLITE_BUSY_TIMEOUT_S=5.0 s; retrying"
    ]


def test_a_run_whose_ledger_tables_were_dropped_under_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `decisions run` migrated its own file at start: tables missing later were dropped under
    # it, and no retry brings them back (it retried for ever, saying so once). Stopping loses
    # nothing a rerun could not redo; the explanation says what the drop cost.
    ledger = tmp_path / "decisions.db"
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///{ledger}")
    get_settings.cache_clear()
    try:
        with LedgerRetries() as retries:
            _retried(TablesMissing("ledger tables are missing (no such table: calls)"))
            with pytest.raises(TablesMissing):
                retries.check()
    finally:
        get_settings.cache_clear()
