"""``decisions trace JOB`` after a reviewer resolved the job's escalation: who, when and the
answer, and every call's whole answer (no "…" cut), through the real CLI (issue 17, item 6)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.escalations import EscalationQueue
from tests.cli.support import decisions, traceback_in
from tests.console.support import REPLIES, publish, refused_escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database, redis_url
from worker.ledger import CallOutcome, Ledger

REDIS_DB = 11
JOB = "trace-resolved-1"
#: Longer than any cut the trace ever made (90 characters), its end a word seen only whole.
LONG_ANSWER = "the customer asks for a refund of the broken mug " * 5 + "ENDOFANSWER"


def escalated_job(ledger: Ledger) -> None:
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    ledger.open_job(
        job_id=JOB,
        kind="decide",
        batch="b1",
        reply_to=REPLIES,
        fingerprint=JOB,
        deadline=deadline,
        job_json="{}",
    )
    ledger.claim(
        job_id=JOB,
        step="decide",
        provider="faux",
        model=None,
        request_sha256=None,
        lease_expires=deadline,
    )
    outcome = CallOutcome(
        step="decide",
        status="answered",
        outcome_json=json.dumps({"head": LONG_ANSWER}),
        cost_usd=0.001,
        cost_basis="estimate",
    )
    ledger.finish_job(
        job_id=JOB,
        message_type="escalation",
        reason="decision_refused",
        message_json="{}",
        outcome=outcome,
    )


def test_trace_shows_the_resolution_and_whole_answers(tmp_path: Path) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        escalated_job(ledger)
    with redis_database(REDIS_DB) as r:
        publish(r, refused_escalation(JOB))
        queue = EscalationQueue(r)
        entry = open_escalations(queue)[0].entry_id
        queue.claim_entry(entry, "ann")
        queue.resolve(entry, "ann", {"urgent": True, "team": "billing", "mood": "cross"})
        settings = {"ledger_url": ledger_url, "redis_url": redis_url(REDIS_DB)}
        text = decisions("trace", JOB, cwd=tmp_path, env={"COLUMNS": "80"}, **settings)
        as_json = decisions("trace", JOB, "--json", cwd=tmp_path, **settings)
    assert text.code == 0, text.output
    assert traceback_in(text.output) is None
    flat = " ".join(text.stdout.split())
    assert "resolved by ann" in flat
    assert str(datetime.now(UTC).year) in flat
    assert '"team": "billing"' in flat
    assert "ENDOFANSWER" in flat and "…" not in text.stdout
    body = json.loads(as_json.stdout)
    assert body["resolution"]["reviewer"] == "ann"
    assert body["resolution"]["answer"]["team"] == "billing"
    assert body["calls"][0]["head"] == " ".join(LONG_ANSWER.split())


def test_trace_of_an_unresolved_job_says_nothing_of_a_resolution(tmp_path: Path) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        escalated_job(ledger)
    with redis_database(REDIS_DB):
        settings = {"ledger_url": ledger_url, "redis_url": redis_url(REDIS_DB)}
        done = decisions("trace", JOB, "--json", cwd=tmp_path, **settings)
    assert done.code == 0, done.output
    assert json.loads(done.stdout)["resolution"] is None
