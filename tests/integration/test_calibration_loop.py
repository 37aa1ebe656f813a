"""The calibration loop end to end on real parts: a `decisions worker` process, a faux
provider, Redis, PostgreSQL. A batch with audits runs; an oracle whose truth follows a known
calibration curve resolves every escalation and audit; `decisions calibration` suggests the
threshold the curve implies; the next batch's worker uses it, and its receipts say so."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from shared import keys
from shared.client import Client
from shared.escalations import EscalationQueue
from shared.labels import audited
from shared.replies import EscalationMessage, ResultMessage
from shared.settings import Settings
from shared.streams import read_entries, read_stream
from tests.support.open_escalations import open_escalations
from tests.support.processes import DECISIONS, decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url
from worker.calibration import store_label_stream
from worker.ledger import Ledger
from worker.ledger.label_ops import LabelFilter

pytestmark = pytest.mark.integration

REDIS_DB = 11
FLOOR = {"calibrated": 0.95, "fallback": 0.3}
AUDIT_RATE = 0.5


def truth(confidence: float) -> float:
    """The machine's real accuracy at a confidence (a step: overconfident below 0.6)."""
    return 0.6 if confidence < 0.6 else 0.99


def implied_threshold(target: float) -> float:
    """The lowest candidate t whose rest (confidence >= t, uniform) reaches ``target``,
    from the curve itself: (0.6 (0.6 - t) + 0.99 * 0.4) / (1 - t) for t < 0.6, else 0.99."""
    for i in range(20):
        t = i * 0.05
        rest = 0.99 if t >= 0.6 else (0.6 * (0.6 - t) + 0.99 * 0.4) / (1 - t)
        if rest >= target:
            return t
    raise AssertionError("unreachable")


def oracle(job_id: str, machine: bool, confidence: float) -> bool:
    draw = int.from_bytes(hashlib.sha256(f"oracle:{job_id}".encode()).digest()[:8], "big")
    right = draw / 2**64 < truth(confidence)
    return machine if right else not machine


def jobs(batch: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{batch}-{i}",
            "batch": batch,
            "state": f"ticket {i}: the customer writes about order {i * 7}",
            "questions": {
                "urgent": {"type": "noul", "instructions": "Is it urgent?", "escalate_below": FLOOR}
            },
            "audit_rate": AUDIT_RATE,
        }
        for i in range(start, start + n)
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("calibration")
    with (
        redis_database(REDIS_DB) as r,
        postgres_schema("calib") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            calibration_ttl_s="0.5",
        )
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                broker_url=redis_url(REDIS_DB), redis_url=redis_url(REDIS_DB), ledger_url=ledger_url
            )
            yield {"redis": r, "env": env, "settings": settings, "ledger_url": ledger_url}


def run_batch(fleet: dict[str, Any], batch: list[dict[str, Any]], stream: str) -> list[Any]:
    client = Client(fleet["settings"])
    report = client.submit_batch(batch, reply_to=stream, chunk_size=32)
    assert not report.rejected
    replies = list(client.replies(stream, job_ids=report.job_ids, timeout_s=300))
    assert sorted(r.job_id for r in replies) == sorted(report.job_ids)
    return replies


def resolve_all(r: redis.Redis) -> dict[str, int]:
    queue = EscalationQueue(r)
    done = {"low_confidence": 0, "audit": 0}
    for item in open_escalations(queue):
        message = item.message
        assert message.answers is not None
        answer = message.answers["urgent"]
        assert isinstance(answer.value, bool) and answer.confidence is not None
        queue.claim_entry(item.entry_id, "oracle")
        queue.resolve(
            item.entry_id, "oracle", {"urgent": oracle(message.job_id, answer.value,
                                                        answer.confidence)}
        )
        done[message.reason] += 1
    return done


def calibration(fleet: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DECISIONS, "calibration", *args],
        env={**fleet["env"], "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_audits_labels_suggestion_and_calibrated_thresholds(fleet: dict[str, Any]) -> None:
    r: redis.Redis = fleet["redis"]
    first = run_batch(fleet, jobs("cal-a", 400), "cal-a")
    # Without labels, the fallback judged every answer; the receipt says so.
    for reply in first:
        (used,) = reply.receipts[0].thresholds.values()
        assert (used.source, used.value, used.labels) == ("fallback", 0.3, 0)
    results = [m for m in first if isinstance(m, ResultMessage)]
    escalated = [m for m in first if isinstance(m, EscalationMessage)]
    assert {m.reason for m in escalated} == {"low_confidence"}
    # Audits never hold a result back: the audited ones are results on the reply stream,
    # and each is on the escalation stream once, as an audit.
    picked = {m.job_id for m in results if audited(m.job_id, AUDIT_RATE)}
    assert 0.35 * len(results) < len(picked) < 0.65 * len(results)
    on_queue = [json.loads(e.message) for e in read_entries(r, keys.ESCALATION_STREAM)]
    audits = [m["job_id"] for m in on_queue if m["reason"] == "audit"]
    assert sorted(audits) == sorted(picked)

    resolved = resolve_all(r)
    assert resolved == {"low_confidence": len(escalated), "audit": len(picked)}
    # An audit's answer publishes no resolution: the job's one result stands alone.
    reply_entries = list(read_stream(r, "cal-a"))
    assert {e.job_id for e in reply_entries if e.type == "resolution"} == {
        m.job_id for m in escalated
    }

    shown = calibration(fleet, "--batch", "cal-a", "--target", "0.95", "--json")
    assert shown.returncode == 0, shown.stderr
    (group,) = json.loads(shown.stdout)
    assert group["question"] == "urgent" and group["provider"] == "faux"
    assert group["labels"] == len(escalated) + len(picked)
    assert group["sources"] == {"escalation": len(escalated), "audit": len(picked)}
    assert group["interval"] == "wilson"
    suggested = group["suggestion"]["escalate_below"]
    print("calibration:", group["labels"], group["sources"], group["suggestion"])
    assert suggested is not None, group["suggestion"]
    assert abs(suggested - implied_threshold(0.95)) <= 0.05 + 1e-9, group["suggestion"]
    # Weighted by 1/audit_rate, the shares speak for the whole batch: at the fallback the
    # share that escalates is the batch's own.
    at_fallback = next(t for t in group["thresholds"] if t["threshold"] == 0.3)
    share = len(escalated) / len(first)
    assert at_fallback["escalated"]["low"] <= share <= at_fallback["escalated"]["high"]

    text = calibration(fleet, "--batch", "cal-a", "--no-store")
    assert text.returncode == 0, text.stderr
    assert all(len(line) <= 80 for line in text.stdout.splitlines()), text.stdout
    assert f"suggested escalate_below for 0.95 (estimate): {suggested:g}" in text.stdout
    too_few = calibration(fleet, "--batch", "cal-a", "--min-labels", "100000", "--no-store")
    assert "no escalate_below suggested for 0.95: too few labels" in too_few.stdout

    time.sleep(1.0)  # the worker's cached "too few labels" expires (calibration_ttl_s=0.5)
    second = run_batch(fleet, jobs("cal-b", 60), "cal-b")
    for reply in second:
        (used,) = reply.receipts[0].thresholds.values()
        assert (used.source, used.value, used.target) == ("calibrated", suggested, 0.95)
        assert used.labels == group["labels"]
        confidence = reply.answers["urgent"].confidence
        assert isinstance(reply, EscalationMessage) == (confidence < suggested)


def test_labels_reach_the_ledger_once_across_a_crash(tmp_path: Path) -> None:
    with redis_database(REDIS_DB + 1) as r, Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        label = {
            "job_id": "j1", "question_id": "urgent", "question_type": "noul",
            "machine_answer": True, "human_answer": False, "correct": False,
            "reviewer": "ann", "source": "escalation", "reason": "low_confidence",
        }
        fields = {"job_id": "j1", "resolved_at_ms": str(now_ms), "labels": json.dumps([label])}
        r.xadd(keys.LABEL_STREAM, fields)  # type: ignore[arg-type]
        r.xadd(keys.LABEL_STREAM, {"job_id": "bad", "labels": "not json"})
        original = ledger.store_labels
        calls = []

        def dies_after_commit(found, resolved=()):  # type: ignore[no-untyped-def]
            calls.append(len(found))
            original(found, resolved)
            raise ConnectionError("killed between the commit and the acknowledgement")

        ledger.store_labels = dies_after_commit  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):
            store_label_stream(ledger, r, consumer="w1")
        ledger.store_labels = original  # type: ignore[method-assign]
        # Another consumer takes the dead one's entries over; nothing is stored twice, the
        # unreadable entry is dropped, and the stream ends empty.
        assert store_label_stream(ledger, r, consumer="w2", claim_idle_s=0) == 0
        assert calls == [1]
        rows = ledger.labels(LabelFilter(question="urgent"))
        assert [(row.job_id, row.correct, row.reviewer) for row in rows] == [("j1", False, "ann")]
        assert r.xlen(keys.LABEL_STREAM) == 0
