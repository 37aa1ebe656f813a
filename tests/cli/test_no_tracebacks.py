"""Every mistake a user or operator can make, through the real ``decisions`` command: one or
two lines naming the setting, file line or option and the fix, exit status 2 (usage,
configuration) or 1 (runtime), and never a traceback, unless ``--debug`` or
``DECISIONS_DEBUG=1`` asks for one."""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from shared import keys
from tests.cli.support import decisions, traceback_in
from tests.support.services import (
    PG_BASE_URL,
    REDIS_HOST,
    REDIS_PORT,
    free_port,
    postgres_schema,
    redis_database,
    redis_url,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: Nothing listens on port 1 of the loopback.
NOWHERE_REDIS = "redis://127.0.0.1:1/0"
UNKNOWN_HOST = "redis://no-such-host.invalid:6379/0"
LOCAL_REDIS = f"redis://{REDIS_HOST}:{REDIS_PORT}"
#: Stands for a PostgreSQL URL naming a database that does not exist (made per case).
MISSING_DATABASE = "<missing database>"


def _missing_database_url() -> str:
    url = sa.make_url(PG_BASE_URL).set(database=f"decisions_missing_{uuid.uuid4().hex[:8]}")
    return url.render_as_string(hide_password=False)


@dataclass
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    #: Each must appear in the error output.
    says: tuple[str, ...]
    settings: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    needs: str | None = None  # "redis" or "postgres": the case talks to the real one
    #: Lines on stderr at most: the explanation, and what the command printed before it.
    lines: int = 2


SUBMIT = ("submit", "tickets.jsonl", "--reply-to", "r1")
#: Redis reachable for the streams, so that a case fails for the one setting it is about.
#: A database of this folder's own (tests/cli), emptied around each case that writes to it:
#: db 0 is the operator's, and a case that submits left its jobs there.
STREAMS_DB = 9
STREAMS = {
    "redis_url": f"{LOCAL_REDIS}/{STREAMS_DB}",
    "broker_url": f"{LOCAL_REDIS}/{STREAMS_DB}",
}

CASES = [
    # --- Redis and the broker -------------------------------------------------------------
    Case(
        "submit-redis-unreachable",
        SUBMIT,
        1,
        ("DECISIONS_BROKER_URL", "127.0.0.1:1", "Connection refused"),
        {"redis_url": NOWHERE_REDIS, "broker_url": NOWHERE_REDIS},
    ),
    Case(
        "results-redis-unreachable",
        ("results", "r1"),
        1,
        ("DECISIONS_REDIS_URL=redis://127.0.0.1:1/0", "start Redis"),
        {"redis_url": NOWHERE_REDIS},
    ),
    Case(
        "results-unknown-host",
        ("results", "r1"),
        1,
        ("DECISIONS_REDIS_URL", "no-such-host.invalid"),
        {"redis_url": UNKNOWN_HOST},
    ),
    Case(
        "results-redis-url-malformed",
        ("results", "r1"),
        2,
        ("DECISIONS_REDIS_URL=redis:/oops", "redis://HOST:PORT/DB"),
        {"redis_url": "redis:/oops"},
    ),
    Case(
        "submit-broker-http",
        SUBMIT,
        2,
        ("DECISIONS_BROKER_URL=http://127.0.0.1:8080/", "'http'", "amqp://"),
        {**STREAMS, "broker_url": "http://127.0.0.1:8080/"},
        needs="redis",
    ),
    Case(
        "submit-broker-url-malformed",
        SUBMIT,
        2,
        ("DECISIONS_BROKER_URL=redis:/oops", "names no host"),
        {**STREAMS, "broker_url": "redis:/oops"},
        needs="redis",
    ),
    Case(
        "submit-amqp-broker-unreachable",
        SUBMIT,
        1,
        ("DECISIONS_BROKER_URL=amqp://guest:***@127.0.0.1:1//", "broker"),
        {**STREAMS, "broker_url": "amqp://guest:secret-canary@127.0.0.1:1//"},
        needs="redis",
    ),
    Case(
        "results-redis-db-99",
        ("results", "r1"),
        2,
        (f"DECISIONS_REDIS_URL={LOCAL_REDIS}/99", "0 to 15"),
        {"redis_url": f"{LOCAL_REDIS}/99"},
        needs="redis",
    ),
    # A database that is not a number was "a bug" (the broker's) or database 0 in silence
    # (the streams'); ?db= is no option of the broker's URL at all. Nothing listens on either
    # URL: refused with the settings, no Redis is reached (before, the streams' one was).
    *(
        Case(
            f"{args[0]}-{variable.lower()}-db-{name}",
            args,
            2,
            (f"DECISIONS_{variable}", says, "redis://HOST:PORT/DB"),
            {"redis_url": NOWHERE_REDIS, "broker_url": NOWHERE_REDIS}
            | {variable.lower(): f"redis://127.0.0.1:1{path}"},
        )
        for args in (SUBMIT, ("status",))
        for variable in ("BROKER_URL", "REDIS_URL")
        for name, path, says in (
            ("not-a-number", "/x", "'x' is not a database number"),
            ("query-not-a-number", "/0?db=x", "?db=x"),
        )
    ),
    Case(
        "escalations-list-redis-unreachable",
        ("escalations", "list"),
        1,
        ("DECISIONS_REDIS_URL=redis://127.0.0.1:1/0",),
        {"redis_url": NOWHERE_REDIS},
    ),
    Case(
        "worker-broker-http",
        ("worker", "--migrate"),
        2,
        ("DECISIONS_BROKER_URL=http://127.0.0.1:8080/", "'http'"),
        {"broker_url": "http://127.0.0.1:8080/"},
        lines=3,  # and, run as root, Celery's warning about it
    ),
    # --- the ledger -----------------------------------------------------------------------
    Case(
        "console-postgres-scheme",
        ("console", "--port", "1"),
        2,
        ("DECISIONS_LEDGER_URL=postgres://u@127.0.0.1:5432/db", "postgresql+psycopg://"),
        {"ledger_url": "postgres://u@127.0.0.1:5432/db"},
        lines=5,  # after the console's own notes on its logins and secret key
    ),
    Case(
        "migrate-missing-database",
        ("migrate",),
        2,
        ("DECISIONS_LEDGER_URL", "PostgreSQL has no database", "createdb decisions_missing_"),
        {"ledger_url": MISSING_DATABASE},
        needs="postgres",
    ),
    Case(
        "worker-missing-database",
        ("worker",),
        2,
        ("DECISIONS_LEDGER_URL", "PostgreSQL has no database", "createdb"),
        {"ledger_url": MISSING_DATABASE},
        needs="postgres",
    ),
    Case(
        "ledger-status-missing-database",
        ("ledger", "status"),
        2,
        ("DECISIONS_LEDGER_URL", "PostgreSQL has no database"),
        {"ledger_url": MISSING_DATABASE},
        needs="postgres",
    ),
    Case(
        "trace-missing-database",
        ("trace", "some-job"),
        2,
        ("DECISIONS_LEDGER_URL", "PostgreSQL has no database"),
        {"ledger_url": MISSING_DATABASE},
        needs="postgres",
    ),
    Case(
        "migrate-postgres-scheme",
        ("migrate",),
        2,
        ("DECISIONS_LEDGER_URL=postgres://u:***@127.0.0.1:5432/db", "postgresql+psycopg://"),
        {"ledger_url": "postgres://u:secret-canary@127.0.0.1:5432/db"},
    ),
    Case(
        "migrate-ledger-url-nonsense",
        ("migrate",),
        2,
        ("DECISIONS_LEDGER_URL=nonsense", "not a database URL"),
        {"ledger_url": "nonsense"},
    ),
    Case(
        "migrate-sqlite-directory-missing",
        ("migrate",),
        2,
        ("DECISIONS_LEDGER_URL=sqlite:////no/such/dir/d.db", "SQLite cannot open"),
        {"ledger_url": "sqlite:////no/such/dir/d.db"},
    ),
    Case(
        "migrate-postgres-unreachable",
        ("migrate",),
        1,
        ("DECISIONS_LEDGER_URL", "cannot be reached", "Connection refused"),
        {"ledger_url": "postgresql+psycopg://postgres@127.0.0.1:1/test"},
    ),
    # --- files ----------------------------------------------------------------------------
    # A line that is not UTF-8 is that line's rejection (issue 16: one bad byte never aborts
    # the rest of a batch), named by its 1-based line number and the byte; the others go on.
    Case(
        "submit-file-not-utf8",
        ("submit", "latin1.jsonl", "--reply-to", "r1"),
        0,
        ("line 2", "not UTF-8", "0xe9"),
        STREAMS,
        needs="redis",
        lines=6,
    ),
    Case(
        "run-file-not-utf8",
        ("run", "latin1.jsonl", "--out", "out-latin1"),
        0,
        ("line 2", "not UTF-8", "0xe9"),
        lines=6,
    ),
    Case(
        "run-out-is-a-file",
        ("run", "one.jsonl", "--out", "tickets.jsonl"),
        2,
        ("tickets.jsonl", "File exists"),
    ),
    # --- settings and options -------------------------------------------------------------
    Case(
        "run-default-provider-bogus",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_DEFAULT_PROVIDER='bogus'", "faux, openai"),
        {"default_provider": "bogus"},
    ),
    Case(
        "submit-default-provider-bogus",
        SUBMIT,
        2,
        ("DECISIONS_DEFAULT_PROVIDER='bogus'",),
        {**STREAMS, "default_provider": "bogus"},
    ),
    Case(
        "worker-default-provider-bogus",
        ("worker",),
        2,
        ("refusing to start", "DECISIONS_DEFAULT_PROVIDER='bogus'"),
        {"default_provider": "bogus"},
    ),
    Case(
        "run-default-runtime-bogus",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_DEFAULT_RUNTIME='bogus'",),
        {"default_runtime": "bogus"},
    ),
    Case(
        "status-chunk-size-abc",
        ("status",),
        2,
        ("DECISIONS_CHUNK_SIZE='abc'", "integer"),
        {"chunk_size": "abc"},
    ),
    Case(
        "run-chunk-size-abc",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_CHUNK_SIZE",),
        {"chunk_size": "abc"},
    ),
    Case(
        "submit-chunk-size-out-of-range",
        SUBMIT,
        2,
        ("DECISIONS_CHUNK_SIZE='0'", "greater than or equal to 1"),
        {"chunk_size": "0"},
    ),
    Case(
        "status-provider-limits-not-json",
        ("status",),
        2,
        ("DECISIONS_PROVIDER_LIMITS is not valid JSON",),
        {"provider_limits": "{max_in_flight: 3"},
    ),
    Case(
        "status-log-format-bad",
        ("status",),
        2,
        ("DECISIONS_LOG_FORMAT='loud'", "'json'"),
        {"log_format": "loud"},
    ),
    Case(
        "settings-alias-named-as-set",
        ("providers",),
        2,
        ("PARALLEL_LIST_PRICE_USD='free'",),
        env={"PARALLEL_LIST_PRICE_USD": "free"},
    ),
    Case("budget-set-not-a-number", ("budget", "set", "b1", "lots"), 2, ("USD 'lots'",)),
    Case("budget-set-negative", ("budget", "set", "b1", "-5"), 2, ("USD '-5'", "above 0")),
    Case("budget-set-nan", ("budget", "set", "b1", "nan"), 2, ("USD 'nan'",)),
    Case("budget-set-huge", ("budget", "set", "b1", "1e308"), 2, ("at most 1,000,000",)),
    Case(
        "budget-max-price-negative",
        ("budget", "show", "b1"),
        2,
        ("DECISIONS_MAX_PRICE_PER_MTOK_USD",),
        {"max_price_per_mtok_usd": '{"openrouter": -1}'},
    ),
    Case(
        "dry-run-price-not-a-number",
        (*SUBMIT, "--dry-run", "--price", "openrouter=cheap"),
        2,
        ("--price", "cheap"),
        STREAMS,
    ),
    # --- found by a newcomer's first hour ------------------------------------------------------
    Case(
        "worker-log-level-unknown",
        ("worker",),
        2,
        ("DECISIONS_LOG_LEVEL='LOUD'", "DEBUG, INFO, WARNING"),
        {"log_level": "LOUD"},
    ),
    Case(
        "migrate-ledger-driver-missing",
        ("migrate",),
        2,
        ("DECISIONS_LEDGER_URL=mysql://u@127.0.0.1/x", "'MySQLdb' is not installed"),
        {"ledger_url": "mysql://u@127.0.0.1/x"},
    ),
    Case(
        "console-port-out-of-range",
        ("console", "--port", "99999"),
        2,
        ("--port", "65535"),
        lines=5,  # the usage box of a bad option value
    ),
    # A zero or negative provider timeout ran, and every job escalated deadline_exceeded
    # ("waiting for a send slot"), the setting never named.
    Case(
        "run-provider-timeout-zero",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_PROVIDER_TIMEOUT_S='0'", "greater than 0"),
        {"provider_timeout_s": "0"},
    ),
    # A negative price failed every job's ledger write ("a bug"); NaN made every cost NaN.
    Case(
        "run-parallel-price-negative",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_PARALLEL_LIST_PRICE_USD='-5'", "greater than or equal to 0"),
        {"parallel_list_price_usd": "-5"},
    ),
    Case(
        "run-typesafe-price-nan",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_TYPESAFE_PRICE_PER_MTOK_USD",),
        {"typesafe_price_per_mtok_usd": "nan"},
    ),
    # Accepted silently before: a marker that expires at once (publish-once no more), a
    # claim that returns at once, a port no socket can have.
    *(
        Case(
            f"run-{name}-out-of-range",
            ("run", "one.jsonl"),
            2,
            (f"DECISIONS_{name.upper()}='{value}'", expected),
            {name: value},
        )
        for name, value, expected in (
            ("publish_marker_ttl_s", "-1", "greater than 0"),
            ("escalation_claim_idle_s", "-5", "greater than or equal to 0"),
            ("visibility_timeout_s", "0", "greater than 0"),
            ("sqlite_busy_timeout_s", "-1", "greater than or equal to 0"),
            ("metrics_port", "70000", "less than or equal to 65535"),
        )
    ),
    # Not an HTTP URL: every job ran, escalated decision_interrupted after a "request sent"
    # of unknown cost, and the run exited 0 without naming the setting.
    Case(
        "run-faux-url-not-a-url",
        ("run", "one.jsonl"),
        2,
        ("DECISIONS_FAUX_URL='nonsense'", "https://HOST"),
        {"faux_url": "nonsense"},
    ),
    Case(
        "run-live-base-url-without-scheme",
        ("run", "one.jsonl", "--live"),
        2,
        ("DECISIONS_OPENAI_BASE_URL='api.openai.com'", "https://HOST"),
        {"openai_base_url": "api.openai.com"},
    ),
    # --- found by sweeping every command with ordinary mistakes ------------------------------
    # A time that is not a number of seconds was "a bug" (NaN, or inf past time_t).
    *(
        Case(
            f"{args[0]}-timeout-{value}",
            (*args, "--timeout", value),
            2,
            ("--timeout", "seconds"),
            {"redis_url": NOWHERE_REDIS, "broker_url": NOWHERE_REDIS},
            lines=5,  # the usage box of a bad option value
        )
        for args in ((*SUBMIT, "--wait"), ("status",))
        for value in ("nan", "inf", "-1")
    ),
    # The faux's options: a value its behaviour refused was "a bug" naming a pydantic field, a
    # port past 65535 an OverflowError, a host that does not resolve a gaierror.
    *(
        Case(
            f"faux-serve-{option[2:]}-{value}",
            ("faux", "serve", "--port", "1", option, value),
            2,
            (option, value),
            lines=5,
        )
        for option, value in (
            ("--mode", "bogus"),
            ("--latency-ms", "-5"),
            ("--retry-after", "nan"),
            ("--fail-first", "-1"),
        )
    ),
    Case(
        "faux-serve-status-code-999",
        ("faux", "serve", "--port", "1", "--mode", "status", "--status-code", "999"),
        2,
        ("--status-code", "999"),
        lines=5,
    ),
    *(
        Case(f"faux-serve-port-{port}", ("faux", "serve", "--port", port), 2, ("--port",), lines=5)
        for port in ("99999", "-5")
    ),
    Case(
        "faux-serve-host-unknown",
        ("faux", "serve", "--host", "no-such-host.invalid", "--port", "8765"),
        2,
        ("cannot listen on no-such-host.invalid:8765", "--host"),
    ),
    Case(
        "faux-serve-host-not-here",
        ("faux", "serve", "--host", "192.0.2.1", "--port", "8765"),  # TEST-NET-1: on no machine
        2,
        ("cannot listen on 192.0.2.1:8765", "--host"),
    ),
    # "Redis answered an error: Invalid stream ID ... @user_script:2", status 1.
    Case(
        "escalations-release-not-an-id",
        ("escalations", "release", "not-an-id"),
        2,
        ("'not-an-id' is not an escalation id", "decisions escalations list"),
        {"redis_url": f"{LOCAL_REDIS}/12"},
        needs="redis",
    ),
    Case(
        "submit-empty-file-wait",
        ("submit", "empty.jsonl", "--reply-to", "r1", "--wait"),
        2,
        ("empty.jsonl holds no job",),
        STREAMS,
        needs="redis",
    ),
    # --- found by an attack review --------------------------------------------------------
    # A check across two settings named neither variable ("default_timeout_s must not exceed
    # deadline_ceiling_s"): here the default timeout is left at its 120 s.
    Case(
        "providers-deadline-ceiling-below-default-timeout",
        ("providers",),
        2,
        (
            "DECISIONS_DEFAULT_TIMEOUT_S=120",
            "DECISIONS_DEADLINE_CEILING_S=8",
            "set DECISIONS_DEFAULT_TIMEOUT_S to at most 8 or DECISIONS_DEADLINE_CEILING_S to "
            "at least 120",
        ),
        {"deadline_ceiling_s": "8"},
    ),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    shutil.copy(ROOT / "examples" / "tickets.jsonl", root / "tickets.jsonl")
    first = (ROOT / "examples" / "tickets.jsonl").read_text().splitlines()[0]
    (root / "one.jsonl").write_text(first + "\n")
    (root / "empty.jsonl").write_text("")
    line = json.dumps({"id": "t-1", "state": "ok", "questions": {}})
    # Line 2 is Latin-1: its "é" (0xe9), the 28th character, is not UTF-8.
    (root / "latin1.jsonl").write_bytes(
        line.encode() + b"\n" + b'{"id": "t-2", "state": "caf\xe9", "questions": {}, "k": 1}\n'
    )
    return root


def _require(needs: str | None) -> None:
    if needs == "redis":
        client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=2)
        try:
            client.ping()
        except redis.ConnectionError:
            pytest.skip(f"Redis at {REDIS_HOST}:{REDIS_PORT} is not reachable")
        finally:
            client.close()
    if needs == "postgres":
        with postgres_schema():  # skips (or fails under CI) when PostgreSQL is not there
            pass


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_mistake_is_explained_without_a_traceback(case: Case, workdir: Path) -> None:
    _require(case.needs)
    settings = {
        k: v.replace(MISSING_DATABASE, _missing_database_url()) for k, v in case.settings.items()
    }
    if case.needs == "redis":
        with redis_database(STREAMS_DB):
            done = decisions(*case.args, cwd=workdir, env=case.env, **settings)
    else:
        done = decisions(*case.args, cwd=workdir, env=case.env, **settings)

    assert traceback_in(done.output) is None, traceback_in(done.output)
    for text in case.says:
        assert text in done.stderr, (text, done.stderr, done.stdout[-500:])
    assert done.code == case.code, done.output[-1500:]
    explanation = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(explanation) <= case.lines, done.stderr
    assert "secret-canary" not in done.output


def test_submit_to_a_redis_broker_that_is_down_leaves_no_job_to_run_later(workdir: Path) -> None:
    # The streams' Redis answers, the broker's port does not: the explanation, and no intake
    # record left for a worker's reaper to republish (before: the first message's jobs had
    # one, and ran minutes after the producer was told the submit failed).
    broker = f"redis://127.0.0.1:{free_port()}/0"
    with redis_database(9) as r:  # this folder's streams database (tests/cli)
        done = decisions(*SUBMIT, cwd=workdir, redis_url=redis_url(9), broker_url=broker)
        records = (r.hlen(keys.INTAKE_JOBS), r.zcard(keys.INTAKE_TIMES))
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 1, done.output
    explanation = [line for line in done.stderr.splitlines() if line.strip()]
    assert 1 <= len(explanation) <= 2, done.stderr
    assert f"cannot reach the broker at DECISIONS_BROKER_URL={broker}" in explanation[0]
    assert "queued before it failed" not in done.stderr  # none was
    assert records == (0, 0)


def test_a_broker_database_out_of_range_is_named_with_the_fix(workdir: Path) -> None:
    # It said "cannot reach the broker ... start the broker there": it is there.
    broker = f"{LOCAL_REDIS}/99"
    with redis_database(12):
        done = decisions(*SUBMIT, cwd=workdir, redis_url=redis_url(12), broker_url=broker)
    assert traceback_in(done.output) is None, traceback_in(done.output)
    assert done.code == 2, done.output
    explanation = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(explanation) == 2, done.stderr
    assert f"DECISIONS_BROKER_URL={broker}" in explanation[0]
    assert "0 to 15" in explanation[1] and "start the broker" not in done.stderr


def test_debug_shows_the_traceback(workdir: Path) -> None:
    plain = decisions("results", "r1", cwd=workdir, redis_url=NOWHERE_REDIS)
    assert traceback_in(plain.output) is None
    for args, env in [
        (("--debug", "results", "r1"), {}),
        (("results", "r1"), {"DECISIONS_DEBUG": "1"}),
    ]:
        done = decisions(*args, cwd=workdir, env=env, redis_url=NOWHERE_REDIS)
        assert done.code == 1
        assert "Traceback (most recent call last)" in done.stderr
        assert "redis.exceptions.ConnectionError" in done.stderr


def test_migrate_says_it_created_the_schema_then_that_it_is_current(workdir: Path) -> None:
    with postgres_schema("cli") as url:
        first = decisions("migrate", cwd=workdir, ledger_url=url)
        assert first.code == 0, first.output
        assert "created the ledger schema" in first.stdout
        again = decisions("migrate", cwd=workdir, ledger_url=url)
        assert again.code == 0, again.output
        assert "up to date" in again.stdout and "created" not in again.stdout


def test_the_console_on_a_port_in_use_names_it_and_the_fix(workdir: Path) -> None:
    ledger_url = f"sqlite:///{workdir / 'console-ledger.db'}"
    assert decisions("migrate", cwd=workdir, ledger_url=ledger_url).code == 0
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = decisions("console", "--port", str(port), cwd=workdir, ledger_url=ledger_url)
    assert traceback_in(done.output) is None, done.output
    assert done.code == 2, done.output
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "another --port" in done.stderr
