"""A fleet worker on a SQLite ledger it cannot write: refused at start, and said at ERROR.

A ``decisions worker`` (or ``celery -A worker.app worker``) whose ledger file is read-only or
on a full disk started, said ready, took every message and retried each for ever: the
writes fail only once a job is opened, and Celery says a retry at INFO. Now it refuses to
start, one line naming the file and why; and a ledger that becomes unwritable while the
worker runs is said at ERROR with its fix, once a minute a problem, not once a message.

Read-only is made as in ``test_ledger_unwritable`` so that it holds for root: ``?mode=ro``
everywhere, and a directory bound read-only or a full tmpfs in a mount namespace of its own.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from celery.exceptions import Retry
from structlog.testing import capture_logs

from shared.errors import SchemaBehind
from shared.settings import get_settings
from tests.cli.support import KEY_VARIABLES, Outcome, decisions, traceback_in
from tests.support.processes import DECISIONS, decisions_env
from tests.support.services import free_port
from worker.ledger import LedgerUnavailable
from worker.process.retries import SAID_EVERY_S, RetryReporter
from worker.tasks import RETRIED

CELERY = str(Path(DECISIONS).with_name("celery"))
#: A worker that is not refused runs until this ends it: the test then fails on the status.
START_TIMEOUT_S = 60


def _nowhere() -> str:
    # No Redis is needed to refuse; one that is not there makes a started worker fail loudly.
    return f"redis://127.0.0.1:{free_port()}/12"


def _refused(done: Outcome, *says: str) -> str:
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 2, done.output[-1500:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-1500:]
    for text in ("refusing to start", *says):
        assert text in lines[0], (text, done.stderr[-1500:])
    assert "ready" not in done.output
    return lines[0]


def _run(
    argv: list[str],
    cwd: Path,
    ledger_url: str,
    *,
    redis: str | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> Outcome:
    """``argv`` with only the ``DECISIONS_*`` settings of a worker on ``ledger_url`` (its
    broker and streams on ``redis``, else where nothing listens)."""
    broker = redis or _nowhere()
    env = decisions_env(ledger_url=ledger_url, broker_url=broker, redis_url=broker)
    for name in KEY_VARIABLES:
        env.pop(name, None)
    env["COLUMNS"] = "200"
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def _migrated(tmp_path: Path) -> Path:
    path = tmp_path / "ledger" / "decisions.db"
    path.parent.mkdir()
    assert decisions("migrate", cwd=tmp_path, ledger_url=f"sqlite:///{path}").code == 0
    return path


def _read_only_url(path: Path) -> str:
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def test_decisions_worker_refuses_a_ledger_opened_read_only(tmp_path: Path) -> None:
    path = _migrated(tmp_path)
    done = decisions(
        "worker",
        cwd=tmp_path,
        timeout_s=START_TIMEOUT_S,
        ledger_url=_read_only_url(path),
        broker_url=_nowhere(),
        redis_url=_nowhere(),
    )
    line = _refused(done, f"the ledger at {path} is read-only", "mode=ro")
    assert "remove ?mode=ro from DECISIONS_LEDGER_URL" in line


def test_celery_itself_refuses_a_ledger_opened_read_only(tmp_path: Path) -> None:
    path = _migrated(tmp_path)
    done = _run([CELERY, "-A", "worker.app", "worker"], tmp_path, _read_only_url(path))
    _refused(done, "is read-only", "mode=ro")


@pytest.mark.parametrize(
    ("mount", "says"),
    [
        ("mount --bind -o ro {d} {d}", "mounted read-only"),
        # Filled after the migration: a worker would open jobs into no space at all.
        ("head -c 8388608 /dev/zero > {d}/filler 2>/dev/null || true", "disk is full"),
    ],
    ids=["read-only-mount", "full-disk"],
)
def test_decisions_worker_refuses_a_ledger_it_cannot_write(
    tmp_path: Path, mount: str, says: str
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    directory = tmp_path / "ledger"
    directory.mkdir()
    ledger = directory / "decisions.db"
    quoted = shlex.quote(str(directory))
    command = shlex.quote(DECISIONS)
    script = "\n".join(
        [
            "set -e",
            f"mount -t tmpfs -o size=4m tmpfs {quoted}",
            f"{command} migrate >/dev/null 2>&1",
            mount.format(d=quoted),
            f"exec {command} worker",
        ]
    )
    argv = ["unshare", "--mount", "--map-root-user", "sh", "-c", script]
    done = _run(argv, tmp_path, f"sqlite:///{ledger}")
    if done.code != 0 and "unshare:" in done.stderr:
        pytest.skip(f"no mount namespace for a test here: {done.stderr.strip()}")
    _refused(done, f"the ledger at {ledger}", says)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_retried_outage_is_said_at_error_once_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "decisions.db"
    monkeypatch.setenv("DECISIONS_LEDGER_URL", f"sqlite:///file:{ledger}?mode=ro&uri=true")
    get_settings.cache_clear()
    clock = Clock()
    report = RetryReporter(RETRIED, clock=clock)
    read_only = LedgerUnavailable(
        f"ledger unavailable at sqlite:///{ledger}: "
        "OperationalError: attempt to write a readonly database"
    )
    try:
        with capture_logs() as logs:
            for _ in range(50):  # fifty messages retrying for one problem
                report(sender=None, reason=Retry(exc=read_only))
            report(sender=None, reason=Retry(exc=ValueError("not an outage")))
            report(sender=None, reason=Retry(exc=SchemaBehind("run `decisions migrate`")))
            clock.now += SAID_EVERY_S
            report(sender=None, reason=Retry(exc=read_only))
    finally:
        get_settings.cache_clear()
    said = [e for e in logs if e["event"] == "worker.retrying"]
    assert [e["log_level"] for e in said] == ["error"] * 3
    first, schema, again = said
    assert f"the ledger at {ledger} is read-only" in first["problem"]
    assert "mode=ro" in first["fix"]
    assert "decisions migrate" in schema["problem"] + str(schema["fix"])
    assert again["problem"] == first["problem"]


# --- a ledger that fills up while the worker runs ---------------------------------------------

#: The worker's side, in its own mount namespace: ready, the disk filled, a batch submitted,
#: the outage said, the disk freed; then the worker's own retry must finish the batch.
FILLS_UP = """
set -e
D={decisions}
mount -t tmpfs -o size=8m tmpfs ledger
$D migrate >/dev/null 2>&1
$D worker > worker.log 2>&1 &
W=$!
# Stopped by pid however the script ends (sh has no job control here: `kill %1` failed, and
# the worker outlived the test and its Redis).
trap 'kill -TERM $W 2>/dev/null; wait $W 2>/dev/null' EXIT
wait_for() {{
  for _ in $(seq 600); do grep -q "$1" worker.log && return 0; sleep 0.1; done; return 1
}}
wait_for worker.ready
head -c 16777216 /dev/zero > ledger/filler 2>/dev/null || true
$D submit two.jsonl --reply-to {stream} >/dev/null
wait_for worker.retrying
rm ledger/filler
for _ in $(seq 90); do
  $D results {stream} > replies.jsonl
  [ "$(wc -l < replies.jsonl)" -ge 2 ] && break
  sleep 1
done
"""


@pytest.mark.integration
def test_a_ledger_that_fills_up_is_said_once_and_the_batch_finishes_when_freed(
    tmp_path: Path,
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    from tests.support.ownservers import own_redis

    lines = (Path(__file__).resolve().parents[2] / "examples" / "tickets.jsonl").read_text()
    (tmp_path / "two.jsonl").write_text("\n".join(lines.splitlines()[:2]) + "\n")
    (tmp_path / "ledger").mkdir()
    script = FILLS_UP.format(decisions=shlex.quote(DECISIONS), stream="filled-replies")
    ledger = f"sqlite:///{tmp_path / 'ledger' / 'decisions.db'}"
    argv = ["unshare", "--mount", "--map-root-user", "sh", "-c", script]
    with own_redis(persist=False) as server:
        done = _run(argv, tmp_path, ledger, redis=server.url(0), timeout_s=180)
    if done.code != 0 and "unshare:" in done.stderr:
        pytest.skip(f"no mount namespace for a test here: {done.stderr.strip()}")
    log = (tmp_path / "worker.log").read_text()
    said = [line for line in log.splitlines() if "worker.retrying" in line]
    # Said once (the worker retried the message several times meanwhile), at ERROR, naming
    # the file and the fix; before, only Celery's INFO "retry: Retry in 5s" lines.
    assert len(said) == 1, log[-3000:]
    assert '"level": "error"' in said[0] and "disk is full" in said[0], said[0]
    assert "free space on that disk" in said[0]
    assert "run the command again" not in said[0]  # the worker retries by itself
    assert "Traceback" not in log
    replies = (tmp_path / "replies.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["job_id"] for r in replies) == ["ticket-0001", "ticket-0002"]
