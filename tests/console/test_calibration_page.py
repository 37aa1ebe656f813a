"""The calibration page over HTTP (a real `decisions console` on the real Redis and a SQLite
ledger): per question and model a reliability diagram drawn on the server, the trade-off
table with its intervals and the suggestion, and the audit queue."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from shared.labels import Label
from shared.replies import Answer, EscalationMessage
from tests.console.server import Visitor, console_env, console_server
from tests.console.support import publish
from tests.support.services import redis_database
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

REDIS_DB = 15


def label(
    i: int, confidence: float, correct: bool, model: str = "m-1"
) -> tuple[Label, datetime, None]:
    return (
        Label(job_id=f"j{i}", question_id="urgent", question_type="noul", provider="faux",
              model=model, machine_answer=True, probability=(1 + confidence) / 2,
              confidence=confidence, human_answer=correct, correct=correct, reviewer="ann",
              source="audit" if i % 2 else "escalation", reason="audit" if i % 2 else
              "low_confidence", weight=2.0 if i % 2 else 1.0),
        datetime.now(UTC),
        None,
    )


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("console-calibration")
    ledger_url = f"sqlite:///{where / 'ledger.db'}"
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        rows = [label(i, (i % 100) / 100, (i % 100) >= 40) for i in range(400)]
        rows += [label(1000 + i, 0.9, True, model="m-2") for i in range(5)]
        ledger.store_labels(rows)
    env = console_env(REDIS_DB, ledger_url)
    with redis_database(REDIS_DB) as r, console_server(env, where / "console.log") as served:
        audit = EscalationMessage(
            job_id="audited-<1>", batch="b1", reason="audit", reply_to="replies",
            context={"questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
                     "state": "s", "audit_rate": 0.5},
            answers={"urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8)},
        )
        publish(r, audit)
        yield served


def test_the_page_draws_each_group_and_lists_the_audit_queue(url: str) -> None:
    ann = Visitor(url)
    try:
        assert ann.login("ann").status_code == 303
        page = ann.get("/calibration", target="0.9")
        assert page.status_code == 200
        html = page.text
        # Two groups: the same question on two models, each with its own diagram.
        assert html.count('class="chart reliability"') == 2
        assert html.index("m-1") < html.index("m-2")
        # m-1: confidences 0.00..0.99 stated (1+c)/2, so bins 0.5..1.0: 5 dots.
        first = html.split("<svg")[1]
        assert len(re.findall(r"<circle", first)) == 5
        # Right from confidence 0.40 up: at 0.35 the rest is 60 of 65 right (92 %), at 0.30
        # 60 of 70 (86 %).
        assert "Suggested escalate_below for 0.9: 0.35" in html
        assert "No escalate_below suggested for 0.9" in html and "too few labels" in html
        assert "audit 200, escalation 200" in html
        # The audit queue: the open audit, its job id escaped.
        assert "audited-&lt;1&gt;" in html and "<1>" not in html
        assert ann.get("/calibration", target="nonsense").status_code == 200
    finally:
        ann.close()
    anonymous = Visitor(url)
    try:
        assert anonymous.get("/calibration").status_code in (302, 303)
    finally:
        anonymous.close()
