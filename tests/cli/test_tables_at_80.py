"""Every listing verb reads whole at 80 columns (no "…" cut, no line past column 80) and has
``--json``, through the real CLI (issue 17, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import decisions, traceback_in

PROVIDERS = {"faux", "openrouter", "typesafe", "parallel", "openai"}


def fits_80(text: str) -> None:
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_providers_at_80_columns_and_as_json(tmp_path: Path) -> None:
    shown = decisions("providers", cwd=tmp_path, env={"COLUMNS": "80"})
    assert shown.code == 0, shown.output
    assert traceback_in(shown.output) is None
    fits_80(shown.stdout)
    for name in PROVIDERS:
        assert name in shown.stdout
    assert "OPENROUTER_API_KEY" in shown.stdout and "max choice options" in shown.stdout
    listed = decisions("providers", "--json", cwd=tmp_path)
    assert listed.code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert {row["name"] for row in rows} == PROVIDERS
    assert all(isinstance(row["key_set"], bool) for row in rows)


LONG_JOB = "support-ticket-2026-11-30-customer-4471-order-99812-refund-request"


def test_ledger_unknown_at_80_columns_and_as_json(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from worker.ledger import CallOutcome, Ledger

    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        ledger.open_job(
            job_id=LONG_JOB,
            kind="decide",
            batch="b1",
            reply_to="r",
            fingerprint=LONG_JOB,
            deadline=deadline,
            job_json="{}",
        )
        ledger.claim(
            job_id=LONG_JOB,
            step="decide",
            provider="openrouter",
            model="some-vendor/a-model-with-a-long-name",
            request_sha256=None,
            lease_expires=deadline,
        )
        ledger.finish_job(
            job_id=LONG_JOB,
            message_type="escalation",
            reason="decision_interrupted",
            message_json="{}",
            outcome=CallOutcome(step="decide", status="unknown", error_code="read_timeout"),
        )
    shown = decisions(
        "ledger", "unknown", cwd=tmp_path, env={"COLUMNS": "80"}, ledger_url=ledger_url
    )
    assert shown.code == 0, shown.output
    fits_80(shown.stdout)
    body = [line.split("│") for line in shown.stdout.splitlines() if line.startswith("│")]
    assert "".join(cells[1].strip() for cells in body) == LONG_JOB
    listed = decisions("ledger", "unknown", "--json", cwd=tmp_path, ledger_url=ledger_url)
    rows = json.loads(listed.stdout)
    assert [(r["job_id"], r["error_code"], r["cost_usd"]) for r in rows] == [
        (LONG_JOB, "read_timeout", None)
    ]


def test_status_at_80_columns_folds_a_long_reason_whole(tmp_path: Path) -> None:
    from tests.support.services import redis_database, redis_url

    ledger_url = "postgresql+psycopg://nobody@127.0.0.1:5432/a_database_that_does_not_exist_here"
    with redis_database(8):
        url = redis_url(8)
        shown = decisions(
            "status", "--timeout", "0.5",
            cwd=tmp_path, env={"COLUMNS": "80"},
            redis_url=url, broker_url=url, ledger_url=ledger_url,
        )  # fmt: skip
    assert traceback_in(shown.output) is None
    fits_80(shown.stdout)
    body = [line.split("│") for line in shown.stdout.splitlines() if line.startswith("│")]
    assert "a_database_that_does_not_exist_here" in "".join(cells[2].strip() for cells in body)


LONG_BATCH = "claims-2026-11-30-" + "north-east-region-" * 4 + "final"
LONG_PROVIDER = "our-internal-gateway-for-decisions-in-the-eu-west-region"
LONG_MODEL = "some-vendor/a-model-with-a-very-long-name-indeed-v2"


def test_the_dry_run_estimate_at_80_columns(tmp_path: Path) -> None:
    """``submit --dry-run`` with long batch, provider and model names: every line within 80
    columns, nothing cut with "…", each name whole (issue 17, item 5)."""
    from tests.support.services import redis_database, redis_url

    question = {"q": {"type": "noul", "instructions": "Is it urgent?"}}
    lines = [
        {"id": "e1", "batch": LONG_BATCH, "state": "hi", "questions": question,
         "provider": LONG_PROVIDER, "model": LONG_MODEL},
        {"id": "e2", "batch": LONG_BATCH + "-2", "state": "hi", "questions": question,
         "provider": "parallel"},
        {"id": "e3", "batch": LONG_BATCH, "state": "hi", "questions": question},
    ]  # fmt: skip
    batch = tmp_path / "jobs.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    hosts = {LONG_PROVIDER: {"base_url": "http://127.0.0.1:9/gw", "key_env": "GW_KEY"}}
    with redis_database(9):
        shown = decisions(
            "submit", str(batch), "--reply-to", "r80", "--dry-run", cwd=tmp_path,
            env={"COLUMNS": "80", "DECISIONS_SYSTEMONE_HOSTS": json.dumps(hosts)},
            redis_url=redis_url(9),
        )  # fmt: skip
    assert shown.code == 0, shown.output
    assert traceback_in(shown.output) is None
    fits_80(shown.stdout)
    flat = "".join(
        cells[1].strip()
        for cells in (line.split("│") for line in shown.stdout.splitlines())
        if len(cells) > 2
    )
    assert LONG_PROVIDER in flat, shown.stdout
    assert "".join(shown.stdout.split()).count(f"batch{LONG_BATCH}") == 2, shown.stdout
    assert "$0.001000" in shown.stdout  # parallel's list price
