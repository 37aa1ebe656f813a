"""Labels are bounded where they are made: a probability or confidence is a share in [0, 1],
a weight a finite number between ``MIN_WEIGHT`` and ``MAX_WEIGHT`` (no NaN, infinity, zero,
negative or subnormal), refused naming the field; an audit rate no such weight follows from
is refused by ``audit_weight``, and a resolution whose labels could not be made still goes
through, without them (the statistics could not count them anyway)."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from pydantic import ValidationError

from shared.calibration import MAX_WEIGHT, MIN_WEIGHT, Scored, countable, report
from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.labels import AUDIT_REASON, Label, audit_weight, labels_of
from shared.replies import Answer, EscalationMessage, Receipt
from shared.resolutions import check_resolution
from shared.verdicts import decide_context, escalation

NAN, INF = float("nan"), float("inf")
SUBNORMAL = 5e-324

GOOD: dict[str, Any] = {
    "job_id": "j1", "question_id": "urgent", "question_type": "noul", "machine_answer": True,
    "probability": 0.9, "confidence": 0.8, "human_answer": True, "correct": True,
    "reviewer": "ann", "source": "audit", "reason": "audit", "weight": 10.0,
}  # fmt: skip

SHARES_REFUSED = [-0.1, 1.0000001, 1.5, NAN, INF, -INF, 1e308]
WEIGHTS_REFUSED = [0.0, -0.0, -1.0, NAN, INF, -INF, SUBNORMAL, 1e-300, MIN_WEIGHT / 2,
                   MAX_WEIGHT * 1.5, 1e308]  # fmt: skip


def refused_fields(**changes: Any) -> list[tuple[str | int, ...]]:
    with pytest.raises(ValidationError) as caught:
        Label(**(GOOD | changes))
    where = [e["loc"] for e in caught.value.errors()]
    assert all(str(loc[0]) in str(caught.value) for loc in where)  # the message names it
    return where


@pytest.mark.parametrize("value", SHARES_REFUSED, ids=repr)
@pytest.mark.parametrize("field", ["probability", "confidence"])
def test_a_label_refuses_a_probability_or_confidence_outside_0_1_naming_it(
    field: str, value: float
) -> None:
    assert refused_fields(**{field: value}) == [(field,)]


@pytest.mark.parametrize("value", WEIGHTS_REFUSED, ids=repr)
def test_a_label_refuses_a_weight_no_audit_rate_gives_naming_it(value: float) -> None:
    assert refused_fields(weight=value) == [("weight",)]


def test_a_label_takes_its_bounds_themselves_and_no_probability_at_all() -> None:
    for changes in (
        {"probability": 0.0, "confidence": 0.0, "weight": MIN_WEIGHT},
        {"probability": 1.0, "confidence": 1.0, "weight": MAX_WEIGHT},
        {"probability": None, "confidence": None, "weight": 1.0},
    ):
        label = Label(**(GOOD | changes))
        assert countable(Scored(label.correct, label.confidence, label.probability, label.weight))
    # As it comes from the label stream: JSON's NaN and Infinity parse, and are refused.
    with pytest.raises(ValidationError, match="weight"):
        Label.model_validate_json('{"job_id": "j", "question_id": "q", "question_type": "noul",'
                                  ' "correct": true, "reviewer": "r", "source": "audit",'
                                  ' "reason": "audit", "weight": Infinity}')  # fmt: skip


@pytest.mark.parametrize(
    ("rate", "weight"), [(None, 1.0), (1.0, 1.0), (0.1, 10.0), (0.5, 2.0), (1 / MAX_WEIGHT, None)]
)
def test_audit_weight_is_the_inverse_of_the_rate(rate: float | None, weight: float | None) -> None:
    got = audit_weight(rate)
    if weight is None:
        assert MAX_WEIGHT * (1 - 1e-12) <= got <= MAX_WEIGHT
    else:
        assert got == weight


@pytest.mark.parametrize(
    "rate", [SUBNORMAL, 1e-300, 1e-10, 0.0, -0.1, 1.5, NAN, INF, "often", True], ids=repr
)
def test_audit_weight_refuses_a_rate_no_label_weight_follows_from(rate: Any) -> None:
    # 5e-324 gave an infinite weight; 1e-10 a weight of 1e10, which every figure leaves out.
    with pytest.raises(ValueError, match="audit_rate"):
        audit_weight(rate)


def job(**extra: Any) -> DecideJob:
    parsed = parse_job({"id": "j1", "reply_to": "r", "batch": "b", "state": "s",
                        "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"},
                                      "mood": {"type": "noul", "instructions": "Cross?"}},
                        **extra})  # fmt: skip
    assert isinstance(parsed, DecideJob)
    return parsed


RECEIPT = Receipt(step="decide", provider="faux", model="m-1", status="answered")
ANSWERS = {
    "urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8),
    "mood": Answer(type="noul", value=True, probability=0.7, confidence=0.6),
}


def audit_of(rate: Any, answers: dict[str, Answer] = ANSWERS) -> EscalationMessage:
    decided = job()
    return EscalationMessage(
        job_id=decided.id, batch=decided.batch, receipts=[RECEIPT], reason=AUDIT_REASON,
        detail="an audit", context={**decide_context(decided), "audit_rate": rate},
        answers=answers, reply_to=decided.reply_to,
    )  # fmt: skip


def test_an_audit_labels_with_the_weight_of_its_rate() -> None:
    message = audit_of(0.25)
    labels = labels_of(message, check_resolution(message, {"urgent": True, "mood": False}), "ann")
    assert [(label.question_id, label.weight) for label in labels] == [
        ("mood", 4.0),
        ("urgent", 4.0),
    ]


@pytest.mark.parametrize("rate", [SUBNORMAL, 1e-12, "often"], ids=repr)
def test_an_audit_at_a_rate_no_weight_follows_from_is_resolved_without_labels(
    rate: Any, caplog: pytest.LogCaptureFixture
) -> None:
    message = audit_of(rate)
    resolved = check_resolution(message, {"urgent": True, "mood": False})
    with caplog.at_level(logging.WARNING, logger="shared.labels"):
        assert labels_of(message, resolved, "ann") == []
    assert "audit_rate" in caplog.text and "j1" in caplog.text


@pytest.mark.parametrize(
    "bad",
    [{"probability": NAN}, {"probability": 1.5}, {"confidence": INF}, {"confidence": -0.2}],
    ids=repr,
)
def test_a_machine_answer_whose_numbers_cannot_count_is_not_labelled_and_the_rest_are(
    bad: dict[str, float], caplog: pytest.LogCaptureFixture
) -> None:
    answers = {**ANSWERS, "urgent": ANSWERS["urgent"].model_copy(update=bad)}
    message = escalation(job(), "low_confidence", "t", [RECEIPT], answers)
    resolved = check_resolution(message, {"urgent": True, "mood": False})
    with caplog.at_level(logging.WARNING, logger="shared.labels"):
        labels = labels_of(message, resolved, "ann")
    assert [label.question_id for label in labels] == ["mood"]
    (field,) = bad
    assert field in caplog.text and "urgent" in caplog.text


@pytest.mark.parametrize("weight", [SUBNORMAL, 1e-200, MIN_WEIGHT / 2], ids=repr)
def test_labels_lighter_than_min_weight_cannot_count_and_do_not_raise(weight: float) -> None:
    # Their squares underflow: alone, the weighted share's variance was 0 / 0.
    tiny = [Scored(correct=i % 2 == 0, confidence=0.9, probability=0.9, weight=weight)
            for i in range(40)]  # fmt: skip
    assert not any(countable(s) for s in tiny)
    figures = report(tiny, target=0.9)
    assert (figures.labels, figures.left_out, figures.accuracy.value) == (0, 40, None)
    lightest = report([replace_weight(s, MIN_WEIGHT) for s in tiny], target=0.9)
    assert lightest.labels == 40 and lightest.accuracy.value == pytest.approx(0.5)
    assert lightest.accuracy.low is not None and math.isfinite(lightest.accuracy.low)


def replace_weight(label: Scored, weight: float) -> Scored:
    return Scored(label.correct, label.confidence, label.probability, weight)


@pytest.mark.parametrize("rate", [5e-324, 1e-12, 9.99e-10])
def test_a_job_refuses_an_audit_rate_whose_labels_could_not_count(rate: float) -> None:
    from shared.errors import JobInvalid
    from shared.job_parsing import parse_job

    job = {
        "id": "a", "reply_to": "r", "state": "s", "audit_rate": rate,
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }  # fmt: skip
    with pytest.raises(JobInvalid) as info:
        parse_job(job)
    assert [p.field for p in info.value.problems] == ["audit_rate"]
    assert parse_job({**job, "audit_rate": 0}).audit_rate == 0
    assert parse_job({**job, "audit_rate": 1e-9}).audit_rate == 1e-9


def test_the_smallest_audit_rate_is_the_inverse_of_the_heaviest_weight() -> None:
    from shared.calibration import MAX_WEIGHT
    from shared.jobs import MIN_AUDIT_RATE

    assert MIN_AUDIT_RATE == 1 / MAX_WEIGHT
