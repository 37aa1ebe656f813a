"""``decisions budget set`` on PostgreSQL making a running batch's budget: it waits for the
transactions begun before it (a claim among them may have read "no budget") and counts their
calls in. Normally that is milliseconds and nothing is said; a session left in a transaction
is named in one line after the wait, and the budget is set all the same."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.cli.support import decisions, traceback_in
from tests.support.services import postgres_schema
from worker.ledger import BudgetAsk, CallOutcome, Ledger
from worker.ledger.budget_late import LATE_CLAIMS_WAIT_S

pytestmark = pytest.mark.integration

BATCH = "bb"


@pytest.fixture
def running_batch() -> Iterator[tuple[str, Ledger]]:
    """A batch with one call settled ($0.1) and one in flight, no budget yet."""
    with postgres_schema("cli_budget") as url:
        ledger = Ledger(url)
        ledger.migrate()
        for job_id in ("j1", "j2"):
            ledger.open_job(
                job_id=job_id, kind="decide", batch=BATCH, reply_to="r", fingerprint="fp",
                deadline=datetime.now(UTC) + timedelta(minutes=5), job_json='{"id": "x"}',
            )  # fmt: skip
            ledger.claim(
                job_id=job_id, step="decide", provider="faux", model="m", request_sha256="s",
                lease_expires=datetime.now(UTC) + timedelta(minutes=5),
                budget=BudgetAsk(worst_usd=0.25, batch=BATCH),
            )  # fmt: skip
        ledger.record(
            job_id="j1",
            outcome=CallOutcome(
                step="decide", status="answered", cost_usd=0.1, cost_basis="reported"
            ),
        )
        try:
            yield url, ledger
        finally:
            ledger.dispose()


def _set(tmp_path: Path, url: str) -> tuple[float, dict[str, object], str]:
    started = time.monotonic()
    done = decisions("budget", "set", BATCH, "5", "--json", cwd=tmp_path, ledger_url=url)
    took = time.monotonic() - started
    assert traceback_in(done.output) is None, done.output
    assert done.code == 0, done.output
    return took, json.loads(done.stdout), done.stderr


def test_setting_a_running_batchs_budget_says_nothing_more_and_is_quick(
    tmp_path: Path, running_batch: tuple[str, Ledger]
) -> None:
    url, ledger = running_batch
    # Beside a command that starts as it does and waits for nothing: a loaded machine (the
    # fresh-clone suite at load 8) took 14.6 s over both, not over the wait.
    started = time.monotonic()
    shown = decisions("budget", "show", BATCH, cwd=tmp_path, ledger_url=url)
    startup = time.monotonic() - started
    assert shown.code == 0, shown.output
    took, figures, stderr = _set(tmp_path, url)
    assert stderr == ""
    # It did not wait out the sessions begun before it (LATE_CLAIMS_WAIT_S).
    assert took < startup + LATE_CLAIMS_WAIT_S / 2
    assert figures["committed_usd"] == pytest.approx(0.1)
    assert figures["calls_in_flight"] == 1
    call = ledger.get_call("j2", "decide")
    assert call is not None and call.budget_scopes == f"batch:{BATCH}"


def test_a_session_left_in_a_transaction_is_named_in_one_line(
    tmp_path: Path, running_batch: tuple[str, Ledger]
) -> None:
    url, ledger = running_batch
    with ledger.engine.connect() as idle, idle.begin():
        pid = idle.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        took, figures, stderr = _set(tmp_path, url)
    assert took >= LATE_CLAIMS_WAIT_S
    assert figures["limit_usd"] == 5.0
    lines = stderr.splitlines()
    assert len(lines) == 1 and f"pid {pid}" in lines[0], stderr
    assert "may not be counted" in lines[0]
