"""What ``decisions worker`` (and ``decisions run``) refuses before it says ready, and the
status it exits with: through the real command, one or two lines and never a traceback.

- a per-provider setting keyed by a name no provider (or runtime) has: it would be ignored
  in silence, and its cap would not apply;
- a streams Redis the worker cannot use (no such database, nothing listening, a bad URL),
  whether or not volatile streams are accepted: every task would fail after its provider
  answered;
- a broker it cannot reach (nothing listening, PostgreSQL's port, a RabbitMQ that is not
  there): Celery retried it for over an hour naming no setting; one it loses later it still
  retries (tests/faults);
- a metrics port another process listens on: it said ``metrics.unavailable``, then
  ``worker.ready`` with that port, and served nothing there;
- a Celery option it cannot parse: a usage error naming the option, not a bug to report;
- a Celery worker that ended on an error: a non-zero status for the supervisor.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.support import KEY_VARIABLES, Outcome, decisions, traceback_in
from tests.support.processes import DECISIONS, decisions_env, worker_process
from tests.support.services import REDIS_HOST, REDIS_PORT, free_port, redis_database, redis_url

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: This file's Redis database: the streams and broker of the cases that reach Redis.
DB = 10
#: Celery's own command, as an operator may start the worker: `celery -A worker.app worker`.
CELERY = str(Path(DECISIONS).with_name("celery"))
#: An option redis-py cannot read (``?db=x`` is refused with the settings, before any Redis).
BAD_OPTION_QUERY = f"redis://{REDIS_HOST}:{REDIS_PORT}/{DB}?socket_timeout=x"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    first = (ROOT / "examples" / "tickets.jsonl").read_text().splitlines()[0]
    (tmp_path / "one.jsonl").write_text(first + "\n")
    return tmp_path


@pytest.fixture
def streams() -> Iterator[dict[str, str]]:
    """Broker and streams on this file's database of the real Redis (skips without one),
    emptied before and after."""
    with redis_database(DB):
        yield {"redis_url": redis_url(DB), "broker_url": redis_url(DB)}


def _explained(done: Outcome, code: int, *says: str, lines: int = 2) -> list[str]:
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == code, done.output[-1500:]
    for text in says:
        assert text in done.stderr, (text, done.stderr[-1500:])
    explanation = [
        line for line in done.stderr.splitlines() if line.strip() and "Warning" not in line
    ]
    assert 1 <= len(explanation) <= lines, done.stderr[-1500:]
    assert "this is a bug" not in done.output
    assert "ready" not in done.output
    return explanation


# --- per-provider settings keyed by no provider ----------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("DECISIONS_DAILY_CEILING_USD", '{"Faux": 0}', ("'Faux'", "did you mean 'faux'")),
        (
            "DECISIONS_PROVIDER_LIMITS",
            '{"fuax": {"max_in_flight": 1}}',
            ("'fuax'", "did you mean 'faux'"),
        ),
        (
            "DECISIONS_MAX_PRICE_PER_MTOK_USD",
            '{"openruter": 0.5}',
            ("'openruter'", "did you mean 'openrouter'"),
        ),
    ],
)
def test_the_worker_refuses_a_setting_keyed_by_no_provider(
    workdir: Path, streams: dict[str, str], variable: str, value: str, says: tuple[str, ...]
) -> None:
    # Everything else would let it start (it did: ready, the cap not applied).
    done = decisions(
        "worker", "--migrate", cwd=workdir, env={variable: value}, timeout_s=60, **streams
    )
    (line,) = _explained(done, 2, "refusing to start", variable, *says, lines=1)
    assert "openrouter, typesafe, parallel, openai" in line


def _celery_worker(
    workdir: Path, env: dict[str, str], *args: str, **settings: str
) -> Outcome:
    """``celery -A worker.app worker`` with these settings, Redis where nothing listens."""
    nowhere = f"redis://127.0.0.1:{free_port()}/12"
    full_env = decisions_env(**{"redis_url": nowhere, "broker_url": nowhere, **settings})
    for name in KEY_VARIABLES:
        full_env.pop(name, None)
    full_env.update(env)
    done = subprocess.run(
        [CELERY, "-A", "worker.app", "worker", *args],
        cwd=workdir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def test_celery_itself_refuses_a_setting_keyed_by_no_provider(workdir: Path) -> None:
    # Only `decisions worker` and `decisions run` checked the names: started by Celery's own
    # command, the worker went on to start (and the cap did not apply).
    done = _celery_worker(
        workdir,
        {"DECISIONS_DAILY_CEILING_USD": '{"Faux": 0}'},
        ledger_url=f"sqlite:///{workdir / 'ledger.db'}",
    )
    (line,) = _explained(
        done, 2, "refusing to start", "DECISIONS_DAILY_CEILING_USD", "did you mean 'faux'", lines=1
    )
    assert line.startswith("refusing to start: DECISIONS_DAILY_CEILING_USD: 'Faux'")


def test_celery_itself_refuses_a_ledger_behind_its_schema(workdir: Path) -> None:
    # It ended on Celery's "Unrecoverable error" with the traceback of SchemaBehind.
    done = _celery_worker(workdir, {}, ledger_url=f"sqlite:///{workdir / 'ledger.db'}")
    _explained(done, 2, "refusing to start", "decisions migrate")


def test_celery_itself_explains_a_setting_it_cannot_read(workdir: Path) -> None:
    # Celery printed "Unable to load celery application" and the traceback of the settings'
    # ValidationError: they are read as worker.app loads.
    done = _celery_worker(workdir, {"DECISIONS_CHUNK_SIZE": "abc"})
    (line, *_) = _explained(done, 2, "DECISIONS_CHUNK_SIZE='abc'", "integer")
    assert line.startswith("refusing to start: DECISIONS_CHUNK_SIZE='abc'")


def test_run_refuses_a_setting_keyed_by_no_provider(workdir: Path) -> None:
    done = decisions(
        "run", "one.jsonl", cwd=workdir, env={"DECISIONS_DAILY_CEILING_USD": '{"paralel": 1}'}
    )
    _explained(done, 2, "DECISIONS_DAILY_CEILING_USD", "'paralel'", "did you mean 'parallel'")
    assert not (workdir / "out").exists()


def test_a_name_far_from_any_provider_lists_them_without_a_guess(workdir: Path) -> None:
    env = {"DECISIONS_PROVIDER_LIMITS": '{"zz": {}}'}
    done = decisions("run", "one.jsonl", cwd=workdir, env=env)
    (line, *_) = _explained(done, 2, "DECISIONS_PROVIDER_LIMITS", "'zz'")
    assert "did you mean" not in line
    assert "openrouter" in line and "typesafe" in line


# --- the streams Redis -----------------------------------------------------------------------


@pytest.mark.parametrize("volatile", ["1", "0"])
def test_the_worker_refuses_a_streams_database_out_of_range(
    workdir: Path, streams: dict[str, str], volatile: str
) -> None:
    done = decisions(
        "worker",
        "--migrate",
        cwd=workdir,
        timeout_s=60,
        broker_url=streams["broker_url"],
        redis_url=f"redis://{REDIS_HOST}:{REDIS_PORT}/99",
        accept_volatile_streams=volatile,
    )
    _explained(done, 2, "refusing to start", "DECISIONS_REDIS_URL", "out of range", lines=2)
    assert "Allow INFO" not in done.stderr


def test_the_worker_refuses_a_streams_redis_nothing_listens_on(
    workdir: Path, streams: dict[str, str]
) -> None:
    port = free_port()
    done = decisions(
        "worker",
        "--migrate",
        cwd=workdir,
        timeout_s=90,
        broker_url=streams["broker_url"],
        redis_url=f"redis://127.0.0.1:{port}/0",
    )
    _explained(
        done, 2, "refusing to start", "DECISIONS_REDIS_URL", f"127.0.0.1:{port}", "refused"
    )


def test_the_worker_refuses_a_streams_url_it_cannot_read(
    workdir: Path, streams: dict[str, str]
) -> None:
    done = decisions(
        "worker",
        "--migrate",
        cwd=workdir,
        timeout_s=60,
        broker_url=streams["broker_url"],
        redis_url=BAD_OPTION_QUERY,
    )
    _explained(done, 2, "refusing to start", "DECISIONS_REDIS_URL", "'socket_timeout'")


@pytest.mark.parametrize(
    "args", [("status",), ("submit", "one.jsonl", "--reply-to", "r1")], ids=["status", "submit"]
)
def test_a_redis_url_option_it_cannot_read_is_named(
    workdir: Path, streams: dict[str, str], args: tuple[str, ...]
) -> None:
    done = decisions(
        *args,
        cwd=workdir,
        broker_url=streams["broker_url"],
        redis_url=BAD_OPTION_QUERY,
        ledger_url=f"sqlite:///{workdir / 'ledger.db'}",
    )
    (problem, *_) = _explained(
        done, 2, f"DECISIONS_REDIS_URL={BAD_OPTION_QUERY}", "'socket_timeout'"
    )
    assert problem.startswith("DECISIONS_REDIS_URL")


# --- the broker ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_the_worker_refuses_a_broker_nothing_listens_on(
    workdir: Path, streams: dict[str, str], scheme: str
) -> None:
    port = free_port()
    done = decisions(
        "worker",
        "--migrate",
        cwd=workdir,
        timeout_s=60,
        broker_url=f"{scheme}://127.0.0.1:{port}/1",
        redis_url=streams["redis_url"],
    )
    (line,) = _explained(
        done, 2, "refusing to start", "DECISIONS_BROKER_URL", f"127.0.0.1:{port}", lines=1
    )
    assert "did not answer in 10 s" in line and "point DECISIONS_BROKER_URL at" in line
    assert ":***@" not in done.output  # kombu's mask, of a password the URL does not have


def test_the_worker_refuses_a_broker_url_naming_postgresql(
    workdir: Path, streams: dict[str, str]
) -> None:
    """PostgreSQL takes the connection and closes it at Redis's first command."""
    done = decisions(
        "worker",
        "--migrate",
        cwd=workdir,
        timeout_s=60,
        broker_url="redis://127.0.0.1:5432/1",
        redis_url=streams["redis_url"],
    )
    _explained(done, 2, "refusing to start", "DECISIONS_BROKER_URL", "127.0.0.1:5432", lines=1)


def test_celery_itself_refuses_a_broker_database_out_of_range(
    workdir: Path, streams: dict[str, str]
) -> None:
    ledger_url = f"sqlite:///{workdir / 'ledger.db'}"
    assert decisions("migrate", cwd=workdir, ledger_url=ledger_url).code == 0
    done = _celery_worker(
        workdir,
        {},
        broker_url=f"redis://{REDIS_HOST}:{REDIS_PORT}/99",
        redis_url=streams["redis_url"],
        ledger_url=ledger_url,
    )
    _explained(done, 2, "refusing to start", "DECISIONS_BROKER_URL", "no database 99", lines=1)


# --- the metrics endpoint ----------------------------------------------------------------


def test_the_worker_refuses_a_metrics_port_in_use(workdir: Path, streams: dict[str, str]) -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = decisions(
            "worker", "--migrate", cwd=workdir, timeout_s=60, metrics_port=str(port), **streams
        )
    (line,) = _explained(done, 2, "refusing to start", f"DECISIONS_METRICS_PORT={port}", lines=1)
    assert "another process listens" in line and "free port" in line


# --- Celery's options and exit status ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--bogus-flag",), "--bogus-flag"),
        (("-P", "nonexistent"), "'nonexistent'"),
        (("--concurrency", "abc"), "--concurrency"),
        # Celery's choices that the worker cannot run on: said, not "a bug in decisions".
        (("-P", "gevent"), "--pool gevent is not supported"),
        (("--pool=eventlet",), "--pool eventlet is not supported"),
        (("-Pcustom",), "--pool custom is not supported"),
    ],
    ids=[
        "unknown-option", "unknown-pool", "concurrency-not-a-number", "gevent", "eventlet",
        "custom",
    ],
)
def test_a_celery_option_mistake_is_a_usage_error(
    workdir: Path, streams: dict[str, str], args: tuple[str, ...], says: str
) -> None:
    done = decisions("worker", "--migrate", *args, cwd=workdir, timeout_s=60, **streams)
    (problem, *_) = _explained(done, 2, "decisions worker", says)
    assert "unexpected error" not in problem


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--autoscale", "10,2"), "--autoscale is not for the loop pool"),
        (("--max-tasks-per-child=5",), "--max-tasks-per-child is not for the loop pool"),
        (("--max-memory-per-child", "100000"), "--max-memory-per-child is not for the loop"),
        (("-P", "threads", "--autoscale=4,1"), "--autoscale is not for the thread pool"),
    ],
    ids=["autoscale", "max-tasks", "max-memory", "threads-autoscale"],
)
def test_a_process_option_the_pool_cannot_honour_is_refused(
    workdir: Path, streams: dict[str, str], args: tuple[str, ...], says: str
) -> None:
    """On the loop pool, ``--autoscale`` set the reserve to its minimum, then ended the
    worker at the first scale-up; the per-child limits did nothing on any pool but prefork."""
    done = decisions("worker", "--migrate", *args, cwd=workdir, timeout_s=60, **streams)
    (line, *_) = _explained(done, 2, "refusing to start", says, "DECISIONS_WORKER_POOL=prefork")
    assert line.startswith("refusing to start: --")


def test_celery_itself_refuses_autoscale_on_the_loop_pool(workdir: Path) -> None:
    done = _celery_worker(
        workdir, {}, "--autoscale=4,1", ledger_url=f"sqlite:///{workdir / 'ledger.db'}"
    )
    _explained(done, 2, "refusing to start", "--autoscale is not for the loop pool")


def test_a_worker_that_ends_on_an_error_exits_non_zero(
    workdir: Path, streams: dict[str, str]
) -> None:
    # Celery cannot write its pid file: the worker ends at once, "Unrecoverable error".
    missing = workdir / "no-such-dir" / "worker.pid"
    done = decisions(
        "worker", "--migrate", f"--pidfile={missing}", cwd=workdir, timeout_s=60, **streams
    )
    assert done.code != 0, done.output[-1500:]
    assert "ready" not in done.output


def test_a_warm_shutdown_still_exits_zero(workdir: Path, streams: dict[str, str]) -> None:
    env = decisions_env(**streams, ledger_url=f"sqlite:///{workdir / 'ledger.db'}")
    with worker_process(env, "--migrate", log=workdir / "worker.log") as proc:
        pass  # ready; stopped warm (SIGTERM) on leaving
    assert proc.returncode == 0, (workdir / "worker.log").read_text()[-1500:]
