"""A ledger whose tables are dropped under a running worker (an attack: `DROP SCHEMA public
CASCADE; CREATE SCHEMA public` mid-batch). The worker said `worker.retrying`, fix "run
`decisions migrate`", hint "nothing unclaimed was sent, and nothing is sent twice"; following
it, every call in flight was sent twice, since the retried messages claim afresh in the new,
empty ledger. The line must not promise what the dropped rows kept: it says a call in flight
may be sent again and that restoring the rows is what keeps them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery.exceptions import Retry
from sqlalchemy import text
from structlog.testing import capture_logs

from shared.settings import get_settings
from worker.ledger import JobRow, Ledger, TablesMissing
from worker.process.retries import OUTAGE_HINT, RetryReporter
from worker.tasks import RETRIED


def wipe(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        if ledger.dialect == "postgresql":  # the test's own schema, as the attack did public
            schema = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            return
        names = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
        for (name,) in names.all():
            conn.exec_driver_sql(f'DROP TABLE "{name}"')


def test_tables_dropped_under_a_worker_are_not_said_as_safe_to_retry(
    ledger: Ledger,
    new_job: Callable[..., JobRow],
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new_job("in-flight")
    wipe(ledger)
    with pytest.raises(TablesMissing) as caught:
        ledger.get_job("in-flight")
    assert isinstance(caught.value, RETRIED)  # the messages are kept, not failed

    monkeypatch.setenv("DECISIONS_LEDGER_URL", ledger_url)
    get_settings.cache_clear()
    try:
        with capture_logs() as logs:
            RetryReporter(RETRIED)(sender=None, reason=Retry(exc=caught.value))
    finally:
        get_settings.cache_clear()
    [said] = [e for e in logs if e["event"] == "worker.retrying"]
    assert said["log_level"] == "error"
    assert "nothing is sent twice" not in said["hint"] and said["hint"] != OUTAGE_HINT
    assert "may then be sent, and paid for, again" in said["hint"]
    assert "has no tables" in said["problem"]
    assert "restore them from a backup" in said["fix"]
    assert "decisions migrate" in said["fix"]
