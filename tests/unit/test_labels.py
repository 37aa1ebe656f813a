"""Labels from resolutions, audit selection, calibrated floors in the job contract and in the
verdict, and the threshold cache (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.errors import JobInvalid, ResolutionInvalid
from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.labels import audited, labels_of
from shared.questions import CalibratedFloor
from shared.replies import Answer, EscalationMessage, Receipt, ResultMessage
from shared.resolutions import check_resolution
from shared.verdicts import escalation, verdict
from worker.calibration.thresholds import ThresholdBook
from worker.ledger import Ledger

QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Urgent?"},
    "team": {
        "type": "choice", "instructions": "Team?", "criteria": {"billing": None, "sales": None}
    },
    "mood": {"type": "score", "instructions": "Mood?", "criteria": ["calm", "cross", "livid"]},
}


def job(**extra: object) -> DecideJob:
    parsed = parse_job({"id": "j1", "reply_to": "r", "batch": "b", "state": "s",
                        "questions": QUESTIONS, **extra})
    assert isinstance(parsed, DecideJob)
    return parsed


RECEIPT = Receipt(step="decide", provider="faux", model="m-1", status="answered")
ANSWERS = {
    "urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8),
    "team": Answer(type="choice", value="sales", probability=0.6, confidence=0.2),
    "mood": Answer(type="score", value=1.2, probability=0.7, label="cross", confidence=0.5),
}


def test_a_resolution_labels_each_machine_answer() -> None:
    message = escalation(job(), "low_confidence", "t", [RECEIPT], ANSWERS)
    resolved = check_resolution(message, {"urgent": True, "team": "billing", "mood": "cross"})
    labels = {label.question_id: label for label in labels_of(message, resolved, "ann")}
    assert set(labels) == {"urgent", "team", "mood"}
    urgent, team, mood = labels["urgent"], labels["team"], labels["mood"]
    assert (urgent.correct, team.correct, mood.correct) == (True, False, True)
    assert team.machine_answer == "sales" and team.human_answer == "billing"
    assert mood.machine_answer == 1 and mood.human_answer == 1  # the nearest level's index
    assert (urgent.provider, urgent.model, urgent.batch) == ("faux", "m-1", "b")
    assert (urgent.probability, urgent.confidence) == (0.9, 0.8)
    assert urgent.source == "escalation" and urgent.weight == 1.0 and urgent.reviewer == "ann"


def test_a_noul_no_is_labelled_with_its_own_probability() -> None:
    # A noul's probability is of yes: a confident "no" (p(yes) 0.04) was given at 0.96, and
    # calibration must see 0.96, or a right "no" counts as a badly overconfident miss.
    answers = {"urgent": Answer(type="noul", value=False, probability=0.04, confidence=0.92)}
    message = escalation(job(), "low_confidence", "t", [RECEIPT], answers)
    resolved = check_resolution(message, {"urgent": False, "team": "sales", "mood": 0})
    (label,) = labels_of(message, resolved, "ann")
    assert (label.machine_answer, label.correct) == (False, True)
    assert (label.probability, label.confidence) == (0.96, 0.92)


def test_a_refused_answer_is_not_labelled_and_true_is_not_a_score_of_one() -> None:
    answers = {**ANSWERS, "team": Answer(type="choice", refused=True)}
    message = escalation(job(), "decision_refused", "t", [RECEIPT], answers)
    resolved = check_resolution(message, {"team": "billing", "mood": 1})
    labels = labels_of(message, resolved, "ann")
    assert sorted(label.question_id for label in labels) == ["mood", "urgent"]
    assert not labels_of(escalation(job(), "decision_interrupted", "t", [], None), {}, "ann")


def test_a_menu_resolution_labels_the_pick() -> None:
    message = EscalationMessage(
        job_id="m1", kind="menu", reason="handler_failed", receipts=[],
        context={"pick": {"call": "refund", "args": {}}, "runtime": {"provider": "faux",
                                                                       "model": "chat-1"}},
    )
    (label,) = labels_of(message, {"call": "escalate", "args": {}}, "bo")
    assert (label.question_id, label.question_type) == ("pick", "menu")
    assert (label.machine_answer, label.human_answer) == ("refund", "escalate")
    assert label.correct is False
    assert (label.provider, label.model, label.probability) == ("faux", "chat-1", None)
    no_pick = message.model_copy(update={"context": {}})
    assert labels_of(no_pick, {"call": "escalate"}, "bo") == []


def test_audit_selection_is_deterministic_and_near_its_rate() -> None:
    ids = [f"job-{i}" for i in range(20_000)]
    picked = [i for i in ids if audited(i, 0.1)]
    assert picked == [i for i in ids if audited(i, 0.1)]
    assert 0.09 < len(picked) / len(ids) < 0.11
    assert not any(audited(i, 0) for i in ids[:100]) and all(audited(i, 1) for i in ids[:100])
    # A higher rate audits a superset: raising it mid-batch keeps the earlier picks.
    assert set(picked) <= {i for i in ids if audited(i, 0.2)}


def test_audit_rate_is_validated_naming_the_field() -> None:
    for bad in (-0.1, 1.5, "often"):
        with pytest.raises(JobInvalid) as caught:
            job(audit_rate=bad)
        assert [p.field for p in caught.value.problems] == ["audit_rate"]
    with pytest.raises(JobInvalid) as caught:
        parse_job({"id": "s", "kind": "sift", "reply_to": "r", "items": ["a"],
                   "question": {"type": "noul", "instructions": "x"}, "audit_rate": 0.1})
    assert [p.field for p in caught.value.problems] == ["audit_rate"]
    # The same job with or without audits is the same job (its stored outcome is reused).
    assert job_fingerprint(job(audit_rate=0.3)) == job_fingerprint(job())


def test_calibrated_floor_is_validated_naming_the_field() -> None:
    ok = job(questions={"q": {"type": "noul", "instructions": "x",
                              "escalate_below": {"calibrated": 0.95, "fallback": 0.7}}})
    assert ok.questions["q"].escalate_below == CalibratedFloor(calibrated=0.95, fallback=0.7)
    for bad, says in (
        ({"calibrated": 1.0, "fallback": 0.7}, "calibrated"),
        ({"calibrated": 0.9}, "fallback"),
        ({"calibrated": 0.9, "fallback": 0.7, "x": 1}, "x"),
        (1.2, "outside 0 to 1"),
        ("high", "a number from 0 to 1"),
    ):
        with pytest.raises(JobInvalid) as caught:
            job(questions={"q": {"type": "noul", "instructions": "x", "escalate_below": bad}})
        (problem,) = caught.value.problems
        assert problem.field == "questions.q.escalate_below"
        assert says in problem.message
    with pytest.raises(JobInvalid) as caught:
        parse_job({"id": "s", "kind": "sift", "reply_to": "r", "items": ["a"],
                   "question": {"type": "noul", "instructions": "x",
                                "escalate_below": {"calibrated": 0.9, "fallback": 0.5}}})
    assert "calibrated floors are for decide" in caught.value.problems[0].message


class Fixed:
    def __init__(self, value: float | None, labels: int) -> None:
        self.value, self.labels = value, labels
        self.asked: list[tuple[str, str, str | None]] = []
        self.types: list[str | None] = []

    def threshold(self, question: str, floor: CalibratedFloor, provider: str, model: str | None,  # type: ignore[no-untyped-def]
                  question_type: str | None = None):
        from shared.replies import Threshold

        self.asked.append((question, provider, model))
        self.types.append(question_type)
        if self.value is None:
            return Threshold(value=floor.fallback, source="fallback", target=floor.calibrated,
                             labels=self.labels)
        return Threshold(value=self.value, source="calibrated", target=floor.calibrated,
                         labels=self.labels)


def calibrated_job() -> DecideJob:
    return job(questions={"urgent": {"type": "noul", "instructions": "x",
                                     "escalate_below": {"calibrated": 0.95, "fallback": 0.5}}})


def test_the_verdict_uses_the_calibrated_threshold_and_says_so() -> None:
    answer = {"urgent": Answer(type="noul", value=True, probability=0.85, confidence=0.7)}
    source = Fixed(0.8, 412)
    message = verdict(calibrated_job(), answer, [RECEIPT], source)
    assert message.type == "escalation" and message.reason == "low_confidence"
    assert source.asked == [("urgent", "faux", "m-1")] and source.types == ["noul"]
    used = message.receipts[0].thresholds
    assert used is not None and used["urgent"].model_dump() == {
        "value": 0.8, "source": "calibrated", "target": 0.95, "labels": 412
    }
    # A reviewer must answer it: below the floor that was used, not the fallback.
    with pytest.raises(ResolutionInvalid) as caught:
        check_resolution(message, {})
    assert [p.field for p in caught.value.problems] == ["answer.urgent"]
    fallback = verdict(calibrated_job(), answer, [RECEIPT], Fixed(None, 12))
    assert isinstance(fallback, ResultMessage)
    assert fallback.receipts[0].thresholds["urgent"].source == "fallback"  # type: ignore[index]
    assert fallback.receipts[0].thresholds["urgent"].labels == 12  # type: ignore[index]


def test_the_threshold_book_reads_the_ledger_once_per_period(tmp_path: Path) -> None:
    from shared.labels import Label

    now = [0.0]
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        book = ThresholdBook(ledger, ttl_s=60, min_labels=30, clock=lambda: now[0])
        floor = CalibratedFloor(calibrated=0.9, fallback=0.4)
        first = book.threshold("urgent", floor, "faux", "m-1")
        assert (first.source, first.value, first.labels) == ("fallback", 0.4, 0)
        at = datetime.now(UTC)
        rows = [
            (Label(job_id=f"j{i}", question_id="urgent", question_type="noul", provider="faux",
                   model="m-1", machine_answer=True, probability=0.5 + c / 2, confidence=c,
                   human_answer=c >= 0.5, correct=c >= 0.5, reviewer="r", source="audit",
                   reason="audit"), at, None)
            for i, c in enumerate(x / 100 for x in range(100))
        ]
        assert ledger.store_labels(rows) == 100
        assert ledger.store_labels(rows) == 0  # stored once
        for _ in range(50):
            assert book.threshold("urgent", floor, "faux", "m-1").source == "fallback"
        assert book.queries == 1
        now[0] += 61
        got = book.threshold("urgent", floor, "faux", "m-1")
        # Right from 0.50 up: at 0.45 the rest is 50 of 55 right (0.909 >= 0.9), at 0.40
        # 50 of 60 (0.833).
        assert (got.source, got.value, got.labels) == ("calibrated", 0.45, 100)
        assert book.queries == 2
        other = book.threshold("urgent", floor, "faux", "m-2")  # another model: its own labels
        assert other.source == "fallback" and other.labels == 0


def test_a_question_id_reused_with_another_type_is_another_question(tmp_path: Path) -> None:
    # "urgent" labelled as a yes/no must not set the floor of an "urgent" asked as a choice,
    # nor share its figures: the groups and the calibrated threshold are per type too.
    from shared.labels import Label
    from worker.calibration import group_reports

    at = datetime.now(UTC)
    rows = [
        (Label(job_id=f"j{i}", question_id="urgent", question_type="noul", provider="faux",
               model="m-1", machine_answer=True, probability=0.9, confidence=c,
               human_answer=c >= 0.5, correct=c >= 0.5, reviewer="r", source="audit",
               reason="audit"), at, None)
        for i, c in enumerate(x / 100 for x in range(100))
    ] + [
        (Label(job_id=f"k{i}", question_id="urgent", question_type="choice", provider="faux",
               model="m-1", machine_answer="yes", probability=0.9, confidence=0.9,
               human_answer="no", correct=False, reviewer="r", source="audit",
               reason="audit"), at, None)
        for i in range(5)
    ]
    floor = CalibratedFloor(calibrated=0.9, fallback=0.4)
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        assert ledger.store_labels(rows) == 105
        book = ThresholdBook(ledger, ttl_s=60, min_labels=30)
        noul = book.threshold("urgent", floor, "faux", "m-1", question_type="noul")
        assert (noul.source, noul.value, noul.labels) == ("calibrated", 0.45, 100)
        choice = book.threshold("urgent", floor, "faux", "m-1", question_type="choice")
        assert (choice.source, choice.value, choice.labels) == ("fallback", 0.4, 5)
        groups = group_reports(ledger.labels(), target=0.9)
    assert [(g.question, g.question_type, g.report.labels) for g in groups] == [
        ("urgent", "choice", 5), ("urgent", "noul", 100)
    ]


def test_a_calibrated_threshold_is_never_below_the_lowest_measured_confidence(
    tmp_path: Path,
) -> None:
    # 60 audits, all right, none below 0.55: the worker's calibrated floor was 0, so an
    # answer at 0.05 (which no label measured) was delivered with "source: calibrated".
    from shared.labels import Label

    at = datetime.now(UTC)
    rows = [
        (Label(job_id=f"j{i}", question_id="urgent", question_type="noul", provider="faux",
               model="m-1", machine_answer=True, probability=c, confidence=c,
               human_answer=True, correct=True, reviewer="r", source="audit",
               reason="audit"), at, None)
        for i, c in enumerate(0.55 + (x % 40) / 100 for x in range(60))
    ]
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        assert ledger.store_labels(rows) == 60
        book = ThresholdBook(ledger, ttl_s=60, min_labels=30)
        got = book.threshold(
            "urgent", CalibratedFloor(calibrated=0.95, fallback=0.9), "faux", "m-1", "noul"
        )
    assert (got.source, got.value, got.labels) == ("calibrated", 0.55, 60)
    # The lowest measured answer is still delivered, anything below it escalates.
    escalated = [c for c in (0.05, 0.5499, 0.55, 0.9) if c < got.value]
    assert escalated == [0.05, 0.5499]


def test_the_cli_prints_a_raised_threshold_exactly() -> None:
    # Raised to an off-grid lowest confidence, the suggestion must print as the floor it is:
    # "0.551234" (the ":g" of 0.5512345) would deliver the answers between the two.
    from shared.calibration import Scored, report
    from worker.calibration import GroupReport
    from worker.cli.calibration import render_group

    labels = [Scored(correct=True, confidence=0.5512345 + (i % 40) / 100) for i in range(60)]
    figures = report(labels, target=0.95, min_labels=30)
    text = render_group(GroupReport("urgent", "faux", "m-1", "noul", figures, {"audit": 60}))
    flat = " ".join(text.split())
    assert "suggested escalate_below for 0.95 (estimate): 0.5512345 - at 0.5512345" in flat
