"""``worker.cli.errors.explain`` in process, for what the subprocess tests cannot provoke
cheaply: a Redis timeout or refused login, a setting out of bounds, a bug."""

from __future__ import annotations

import kombu.exceptions
import pytest
import redis.exceptions
from pydantic import ValidationError

from shared.errors import SubmitFailed
from shared.settings import Settings, get_settings
from worker.cli.errors import RUNTIME, USAGE, explain
from worker.ledger.errors import LedgerConflict


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DECISIONS_REDIS_URL", "DECISIONS_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()


def test_a_redis_timeout_names_the_settings_of_that_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DECISIONS_REDIS_URL", "redis://:pw-canary@10.1.2.3:6380/0")
    got = explain(redis.exceptions.TimeoutError("Timeout connecting to 10.1.2.3:6380."))
    assert got.exit_code == RUNTIME
    assert "DECISIONS_REDIS_URL=redis://:***@10.1.2.3:6380/0" in got.problem
    assert "DECISIONS_BROKER_URL" not in got.problem  # another server
    assert "pw-canary" not in " ".join(got.lines())


def test_a_refused_redis_login_is_configuration() -> None:
    got = explain(redis.exceptions.AuthenticationError("invalid username-password pair"))
    assert got.exit_code == USAGE
    assert "password" in (got.fix or "")


def test_a_setting_out_of_bounds_is_named_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECISIONS_CONSOLE_SESSION_MAX_AGE_S", "5")
    with pytest.raises(ValidationError) as caught:
        Settings()
    got = explain(caught.value)
    assert got.problem.startswith("DECISIONS_CONSOLE_SESSION_MAX_AGE_S='5':")
    assert got.exit_code == USAGE


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        # Each passed validation and then overflowed in every job (a datetime past 9999).
        ("DECISIONS_DEADLINE_CEILING_S", "inf", "finite"),
        ("DECISIONS_VISIBILITY_TIMEOUT_S", "1e15", "less than or equal to 315360000"),
        ("DECISIONS_DEFAULT_TIMEOUT_S", "nan", "finite"),
        # Past 32,767 Celery's prefetch (twice it) passes 65,535 and Celery turns it off.
        ("DECISIONS_MAX_IN_FLIGHT", "1000000000", "less than or equal to 32767"),
        ("DECISIONS_GC_FIRST_THRESHOLD", "99999999999", "less than or equal to 2147483647"),
        (
            "DECISIONS_SYSTEMONE_HOSTS",
            '{"h": {"base_url": "http://h.invalid", "key_env": "K", "price_per_mtok_usd": -5}}',
            "greater than or equal to 0",
        ),
    ],
)
def test_settings_that_would_break_every_job_are_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    got = explain(caught.value)
    assert got.problem.startswith(name) and says in got.problem
    assert got.exit_code == USAGE


def test_a_bug_is_reported_as_one_and_points_at_debug() -> None:
    got = explain(ZeroDivisionError("division by zero"))
    assert got.exit_code == RUNTIME
    assert got.problem == "unexpected error: ZeroDivisionError: division by zero"
    assert "--debug" in (got.fix or "") and len(got.lines()) == 2


_UNVERIFIED = (
    "Error 1 connecting to 10.1.2.3:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
    "failed: self-signed certificate in certificate chain (_ssl.c:1006)."
)


def test_a_broker_certificate_nobody_vouches_for_names_the_url_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DECISIONS_BROKER_URL", "rediss://10.1.2.3:6380/0")
    got = explain(kombu.exceptions.OperationalError(_UNVERIFIED))
    assert "DECISIONS_BROKER_URL=rediss://10.1.2.3:6380/0" in got.problem
    assert "ssl_ca_certs=" in (got.fix or "") and "start the broker" not in (got.fix or "")


def test_a_redis_certificate_nobody_vouches_for_names_the_url_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DECISIONS_REDIS_URL", "rediss://10.1.2.3:6380/0")
    got = explain(redis.exceptions.ConnectionError(_UNVERIFIED))
    assert "DECISIONS_REDIS_URL" in (got.fix or "")
    assert "ssl_ca_certs=" in (got.fix or "") and "start Redis" not in (got.fix or "")


def _submit_failed(queued: int, broker_error: Exception) -> SubmitFailed:
    ids = [f"j-{n}" for n in range(10)]
    try:
        raise SubmitFailed(ids[:queued], ids[queued : queued + 2], ids[queued + 2 :]) from (
            broker_error
        )
    except SubmitFailed as failed:
        return failed


def test_a_submit_the_broker_stopped_half_way_says_how_many_jobs_were_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DECISIONS_BROKER_URL", "redis://10.1.2.3:6379/0")
    refused = kombu.exceptions.OperationalError("Error 111 connecting to 10.1.2.3:6379.")
    plain = explain(refused)
    got = explain(_submit_failed(4, refused))
    assert got.exit_code == RUNTIME and len(got.lines()) == 2
    assert got.problem == f"{plain.problem}; 4 job(s) were queued before it failed"
    assert got.fix == f"{plain.fix}; submitting the same file again is safe: a job id runs once"
    # None queued: the broker's own explanation, as before.
    assert explain(_submit_failed(0, refused)) == plain
    # Rejections already on the stream are named too (by id, and lines without one).
    try:
        raise SubmitFailed([], [], ["a"], ["bad"], [3]) from refused
    except SubmitFailed as failed:
        rejected = explain(failed)
    assert rejected.problem == (
        f"{plain.problem}; 0 job(s) were queued and 2 rejected (their rejected messages are "
        "on the stream) before it failed"
    )


def test_a_ledger_conflict_that_outlasted_its_tries_is_no_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server is up and aborted a transaction for a deadlock: "cannot be reached ...
    start the database" sent the operator to the wrong place."""
    monkeypatch.setenv("DECISIONS_LEDGER_URL", "postgresql+psycopg://u:pw-canary@db:5432/ledger")
    conflict = LedgerConflict(
        "ledger conflict at postgresql+psycopg://u:***@db:5432/ledger: SQLSTATE 40P01 "
        "deadlock_detected, the transaction was rolled back by the server (deadlock "
        "detected); still so after 4 tries",
        "40P01",
    )
    got = explain(conflict)
    assert got.exit_code == RUNTIME and len(got.lines()) == 2
    assert "aborted a transaction for a conflict with another" in got.problem
    assert "a command, run it again" in (got.fix or "")
    assert "40P01 deadlock_detected" in got.problem
    assert "cannot be reached" not in got.problem and "start the database" not in (got.fix or "")
    assert "pw-canary" not in " ".join(got.lines())
