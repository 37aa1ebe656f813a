"""A label stored damaged (by hand, a restore, a producer's NaN) never fails a decision.

A label whose probability or confidence is NaN, infinite or outside [0, 1], or whose weight no
audit rate gives, cannot count. No ``Label`` is made so, and the ledger refuses such a row
(revision 0005), but a ledger whose checks were lifted (by hand, or a restore without them)
may hold one all the same: the statistics leave it out (``shared.calibration``), the
threshold book falls back to the question's fallback floor on any failure to compute (never a
failed decision: the call would stay claimed and be booked "possibly sent", unsent), and
``decisions calibration`` says how many it left out instead of crashing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from shared.calibration import Scored, countable, report
from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.labels import Label
from shared.questions import CalibratedFloor
from shared.replies import parse_reply
from shared.settings import Settings
from tests.cli.support import decisions, traceback_in
from worker.calibration import thresholds as thresholds_module
from worker.calibration.thresholds import ThresholdBook
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

#: Label columns as a hand-written row damages them (SQLite stores NaN as NULL: PG only).
BAD_LABELS: dict[str, dict[str, float]] = {
    "probability-huge": {"probability": 1e308},
    "probability-inf": {"probability": float("inf")},
    "probability-negative": {"probability": -0.5},
    "confidence-inf": {"confidence": float("-inf")},
    "confidence-above-one": {"confidence": 5.0},
    "weight-huge": {"weight": 1e308},
    "weight-inf": {"weight": float("inf")},
}
PG_ONLY = {
    "probability-nan": {"probability": float("nan")},
    "confidence-nan": {"confidence": float("nan")},
    "weight-nan": {"weight": float("nan")},
}
#: What the statistics may be given, never read from a ledger here.
UNSTORABLE = {
    "weight-zero": {"weight": 0.0},
    "weight-negative": {"weight": -3.0},
    "weight-subnormal": {"weight": 5e-324},  # its square is 0: counted, it raised
}
FLOOR = {"calibrated": 0.9, "fallback": 0.7}
#: The ledger's checks of a label's bounds (worker.ledger.models), lifted to write the above.
LIFTED = ("ck_labels_probability_share", "ck_labels_confidence_share", "ck_labels_weight_bounded")


def good_labels(n: int = 100) -> list[tuple[Label, datetime, None]]:
    """Right from confidence 0.50 up: at 0.9 the book suggests 0.45 (``test_labels``)."""
    at = datetime.now(UTC)
    return [
        (Label(job_id=f"j{i}", question_id="q", question_type="noul", provider="faux",
               model="faux-1", machine_answer=True, probability=0.5 + c / 2, confidence=c,
               human_answer=c >= 0.5, correct=c >= 0.5, reviewer="r", source="audit",
               reason="audit"), at, None)
        for i, c in enumerate(x / 100 for x in range(n))
    ]  # fmt: skip


def insert_label(ledger: Ledger, job_id: str, **columns: Any) -> None:
    """A label row written by hand, as no ``Label`` would be, into a ledger whose checks on
    labels were lifted (dropped on PostgreSQL, ignored on SQLite): it refuses it otherwise."""
    values: dict[str, Any] = {
        "job_id": job_id, "question_id": "q", "batch": "cb", "question_type": "noul",
        "provider": "faux", "model": "faux-1", "machine_answer": "true", "probability": 0.9,
        "confidence": 0.8, "human_answer": "true", "correct": True, "reviewer": "r",
        "resolved_at": datetime.now(UTC), "source": "audit", "reason": "audit",
        "weight": 1.0, "stored_at": datetime.now(UTC),
    }  # fmt: skip
    values.update(columns)
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    with ledger.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA ignore_check_constraints = ON")
        else:
            drops = ", ".join(f"DROP CONSTRAINT IF EXISTS {name}" for name in LIFTED)
            conn.exec_driver_sql(f"ALTER TABLE labels {drops}")
        conn.execute(sa.text(f"INSERT INTO labels ({names}) VALUES ({marks})"), values)
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA ignore_check_constraints = OFF")




def bad_cases(url: str) -> dict[str, dict[str, float]]:
    return BAD_LABELS | (PG_ONLY if url.startswith("postgresql") else {})


# --- the statistics ------------------------------------------------------------------------


@pytest.mark.parametrize("damage", [*(BAD_LABELS | PG_ONLY | UNSTORABLE).values()],
                         ids=[*(BAD_LABELS | PG_ONLY | UNSTORABLE)])  # fmt: skip
def test_a_label_that_cannot_count_is_left_out_of_every_figure(damage: dict[str, float]) -> None:
    good = [
        Scored(correct=c >= 0.5, confidence=c, probability=0.5 + c / 2, weight=1 + (i % 3))
        for i, c in enumerate(x / 50 for x in range(50))
    ] + [Scored(correct=True), Scored(correct=False, probability=0.3)]  # no confidence: fine
    fields: dict[str, Any] = {"correct": False, "confidence": 0.9, "probability": 0.9} | damage
    bad = Scored(**fields)
    assert all(countable(s) for s in good) and not countable(bad)
    clean = report(good, target=0.9, min_labels=10)
    assert clean.left_out == 0
    mixed = report([bad, *good[:20], bad, *good[20:]], target=0.9, min_labels=10)
    assert mixed == replace(clean, left_out=2)


def test_labels_that_all_cannot_count_give_no_figures() -> None:
    figures = report([Scored(correct=True, probability=float("nan"))] * 40, target=0.9)
    assert (figures.labels, figures.left_out, figures.accuracy.value) == (0, 40, None)
    assert figures.suggestion is not None and figures.suggestion.threshold is None


# --- the threshold book --------------------------------------------------------------------


def test_a_label_that_cannot_count_does_not_move_the_threshold(ledger_url: str) -> None:
    floor = CalibratedFloor(**FLOOR)
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
        assert ledger.store_labels(good_labels()) == 100
        for i, damage in enumerate(bad_cases(ledger_url).values()):
            insert_label(ledger, f"bad{i}", **damage)
        book = ThresholdBook(ledger, ttl_s=60, min_labels=30)
        got = book.threshold("q", floor, "faux", "faux-1", question_type="noul")
    assert (got.source, got.value, got.labels) == ("calibrated", 0.45, 100)


def test_any_failure_to_compute_gives_the_fallback_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in the figures")

    monkeypatch.setattr(thresholds_module, "report", broken)
    now = [0.0]
    floor = CalibratedFloor(**FLOOR)
    job = parse_job({
        "id": "j", "reply_to": "r", "state": "s",
        "questions": {"q": {"type": "noul", "instructions": "x", "escalate_below": FLOOR}},
    })  # fmt: skip
    assert isinstance(job, DecideJob)
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger, capture_logs() as logs:
        ledger.migrate()
        ledger.store_labels(good_labels())
        book = ThresholdBook(ledger, ttl_s=60, min_labels=30, clock=lambda: now[0])
        asyncio.run(book.prefetch(job, "faux", "faux-1"))  # on the worker's path: no raise
        for _ in range(5):
            got = book.threshold("q", floor, "faux", "faux-1", question_type="noul")
            assert (got.source, got.value, got.labels) == ("fallback", 0.7, 0)
    failed = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(failed) == 1 and failed[0]["error"] == "ZeroDivisionError", logs
    assert book.queries == 1


# --- a decision on a bad label, end to end ---------------------------------------------------


def test_a_decision_on_a_calibrated_floor_survives_a_bad_label(ledger_url: str) -> None:
    settings = Settings(_env_file=None, ledger_url=ledger_url, faux_url=None)
    ledger = Ledger.from_settings(settings)
    try:
        ledger.migrate()
        for i, damage in enumerate(bad_cases(ledger_url).values()):
            insert_label(ledger, f"bad{i}", **damage)
        faux = FauxProvider()
        runner = Runner(
            settings=settings, ledger=ledger, sink=MemorySink(),
            providers=ProviderRegistry.from_settings(settings, faux_transport=faux.transport()),
        )  # fmt: skip
        question = {"type": "noul", "instructions": "Urgent?", "escalate_below": FLOOR}
        job = {"id": "cal1", "reply_to": "r", "state": "where is my parcel?",
               "questions": {"q": question}}  # fmt: skip
        outcome = asyncio.run(runner.run_one(job))
        assert outcome in ("result", "escalation")
        assert faux.total() == 1
        call = ledger.calls("cal1")[0]
        assert call.status == "answered"  # not left claimed, to be booked "possibly sent"
        row = ledger.get_job("cal1")
        assert row is not None and row.terminal_message is not None
        used = parse_reply(row.terminal_message).receipts[0].thresholds
        assert used is not None and used["q"].source == "fallback", used
    finally:
        ledger.dispose()


# --- decisions calibration -----------------------------------------------------------------


def test_decisions_calibration_leaves_bad_labels_out_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url) as ledger:
        ledger.migrate()
        ledger.store_labels(good_labels())
        for i, damage in enumerate(BAD_LABELS.values()):
            insert_label(ledger, f"bad{i}", **damage)
        # A stored answer nested deeper than the parser goes: read back as its text.
        deep = "[" * 5000 + "]" * 5000
        insert_label(ledger, "deep", machine_answer=deep, human_answer=deep)
        row = next(r for r in ledger.labels() if r.job_id == "deep")
        assert row.machine_answer == deep and row.human_answer == deep
    text = decisions("calibration", "--no-store", "--target", "0.9", cwd=tmp_path,
                     ledger_url=url)  # fmt: skip
    assert text.code == 0, text.output
    assert traceback_in(text.output) is None and "unexpected error" not in text.output
    flat = " ".join(text.stdout.split())
    assert "left out 7" in flat, text.stdout
    assert "suggested escalate_below for 0.9 (estimate): 0.45" in flat
    as_json = decisions("calibration", "--no-store", "--json", cwd=tmp_path, ledger_url=url)
    assert as_json.code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert [(g["labels"], g["left_out"]) for g in body] == [(101, 7)]
