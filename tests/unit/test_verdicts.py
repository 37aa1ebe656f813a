"""From answers to the terminal message: refusals and confidence floors escalate."""

from __future__ import annotations

from shared.job_parsing import parse_job
from shared.replies import Answer
from shared.verdicts import verdict

JOB = parse_job(
    {
        "id": "v1",
        "reply_to": "r",
        "state": "s",
        "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?"},
            "team": {
                "type": "choice",
                "instructions": "Team?",
                "criteria": {"a": None, "b": None},
                "escalate_below": 0.6,
            },
        },
    }
)


def noul(p: float) -> Answer:
    return Answer(
        type="noul",
        value=p >= 0.5,
        probability=p,
        confidence=abs(p - 0.5) * 2,
        confidence_source="derived",
    )


def choice(c: float | None) -> Answer:
    return Answer(
        type="choice", value="a", probability=0.7, confidence=c, confidence_source="reported"
    )


def test_confident_answers_are_a_result() -> None:
    message = verdict(JOB, {"urgent": noul(0.9), "team": choice(0.8)}, [])
    assert message.type == "result" and message.answers is not None
    assert message.answers["team"].value == "a"


def test_a_refusal_escalates_and_never_becomes_a_value() -> None:
    refused = Answer(type="choice", refused=True)
    message = verdict(JOB, {"urgent": noul(0.9), "team": refused}, [])
    assert message.type == "escalation" and message.reason == "decision_refused"
    assert message.answers is not None and message.answers["team"].value is None
    assert "team" in message.detail


def test_a_missing_answer_counts_as_refused() -> None:
    message = verdict(JOB, {"urgent": noul(0.9)}, [])
    assert message.type == "escalation" and message.reason == "decision_refused"


def test_below_the_floor_escalates_low_confidence_with_the_answers() -> None:
    message = verdict(JOB, {"urgent": noul(0.9), "team": choice(0.55)}, [])
    assert message.type == "escalation" and message.reason == "low_confidence"
    assert message.answers is not None and message.answers["team"].confidence == 0.55
    assert message.context["questions"]["team"]["escalate_below"] == 0.6


def test_a_question_without_a_floor_never_escalates_for_confidence() -> None:
    message = verdict(JOB, {"urgent": noul(0.51), "team": choice(0.61)}, [])
    assert message.type == "result"
