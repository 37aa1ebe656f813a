"""Remote control reads no password: a real worker whose broker, streams and ledger URLs each
carry a canary password answers ``celery inspect conf`` (with and without Celery's defaults)
and ``report`` without any of them, and logs none of them while it serves a job.

The broker and the streams use an ACL user of the suite's own Redis with two canary
passwords (so the URLs really authenticate); PostgreSQL trusts local connections, so the
ledger URL's canary password is sent and ignored.
"""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.client import Client
from shared.settings import Settings
from tests.fleet.support import flushed, worker
from tests.support.fleet import decide_job
from tests.support.ownservers import OwnRedis
from tests.support.processes import DECISIONS, decisions_env
from tests.support.services import postgres_schema
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

CELERY = str(Path(DECISIONS).with_name("celery"))
HOSTNAME = f"secrets-{uuid.uuid4().hex[:6]}@%h"


@dataclass
class Rig:
    env: dict[str, str]
    log: Path
    settings: Settings
    canaries: tuple[str, ...]


def _with_password(url: str, user: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    host = rest.rsplit("@", 1)[-1]
    return f"{scheme}://{user}:{password}@{host}"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, redis_server: OwnRedis) -> Iterator[Rig]:
    logs = tmp_path_factory.mktemp("secrets")
    broker_pw, streams_pw, ledger_pw = (f"canary{i}{uuid.uuid4().hex}" for i in range(3))
    with flushed(redis_server, 0) as (r, url0), postgres_schema("secrets") as ledger_url:
        user = f"u{uuid.uuid4().hex[:8]}"
        r.execute_command(
            "ACL", "SETUSER", user, "on", f">{broker_pw}", f">{streams_pw}", "~*", "&*", "+@all"
        )
        try:
            broker_url = _with_password(url0, user, broker_pw)
            redis_url = _with_password(redis_server.url(1), user, streams_pw)
            ledger_url = _with_password(ledger_url, "postgres", ledger_pw)
            with Ledger(ledger_url) as ledger:
                ledger.migrate()
            env = decisions_env(
                broker_url=broker_url,
                redis_url=redis_url,
                ledger_url=ledger_url,
                worker_concurrency="1",
                reaper_interval_s="0",
            )
            log = logs / "worker.log"
            settings = Settings(broker_url=broker_url, redis_url=redis_url, ledger_url=ledger_url)
            with worker(env, log, f"--hostname={HOSTNAME}"):
                yield Rig(env, log, settings, (broker_pw, streams_pw, ledger_pw))
        finally:
            r.execute_command("ACL", "DELUSER", user)
            redis_server_db1 = type(r).from_url(redis_server.url(1))
            redis_server_db1.flushdb()
            redis_server_db1.close()


def leaked(rig: Rig, text: str) -> list[str]:
    return [canary for canary in rig.canaries if canary in text]


def destination() -> str:
    return HOSTNAME.replace("%h", socket.gethostname())


@pytest.mark.parametrize(
    "args",
    [("inspect", "conf"), ("inspect", "conf", "true"), ("inspect", "report")],
    ids=["conf", "conf-with-defaults", "report"],
)
def test_remote_control_answers_without_a_password(rig: Rig, args: tuple[str, ...]) -> None:
    done = subprocess.run(
        [CELERY, "-A", "worker.app", *args, "--timeout", "10", "-d", destination()],
        env=rig.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    # It answered (a silent worker would leak nothing and prove nothing).
    assert done.returncode == 0, output
    assert "OK" in output or "->" in output, output
    if args[1] == "conf":
        assert "task_default_queue" in output, output
        assert "broker_url" in output or len(args) == 2, output
    assert leaked(rig, output) == [], output


def test_a_served_job_logs_no_password(rig: Rig) -> None:
    client = Client(rig.settings)
    stream = f"secrets-{uuid.uuid4().hex[:6]}"
    job = decide_job(f"secrets-{uuid.uuid4().hex[:6]}")
    report = client.submit_batch([job], reply_to=stream)
    assert not report.rejected
    replies = list(client.replies(stream, job_ids=report.job_ids, timeout_s=60))
    assert [r.type for r in replies] == ["result"]
    assert leaked(rig, rig.log.read_text(errors="replace")) == []


def test_settings_show_no_password_in_any_repr(rig: Rig) -> None:
    for text in (repr(rig.settings), str(rig.settings), f"{rig.settings!r}"):
        assert leaked(rig, text) == []
    # ... while the URLs themselves still connect (the job above went through them).
    assert all(
        canary
        in str(rig.settings.ledger_url) + str(rig.settings.broker_url) + str(rig.settings.redis_url)
        for canary in rig.canaries
    )
