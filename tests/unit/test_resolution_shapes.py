"""``check_resolution`` on escalation entries of another shape than the worker writes: each
is refused naming the question, never a TypeError (an entry is anyone's to write)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import ResolutionInvalid
from shared.replies import EscalationMessage
from shared.resolutions import check_resolution, questions_problem


def _escalation(questions: Any) -> EscalationMessage:
    return EscalationMessage(
        job_id="j1", reason="decision_interrupted", detail="d", context={"questions": questions}
    )


@pytest.mark.parametrize(
    ("questions", "answer", "named"),
    [
        (["x"], {}, "not an object"),
        ({"q": "x"}, {"q": True}, "'q' is not an object"),
        ({"q": {"type": "choice", "criteria": 5}}, {"q": "a"}, "without an object of options"),
        ({"q": {"type": "score", "criteria": [1, 2]}}, {"q": 0}, "without a list of levels"),
        ({"q": {"type": "score", "criteria": "abc"}}, {"q": 0}, "without a list of levels"),
        ({"q": {"type": "noul", "escalate_below": "0.5"}}, {"q": True}, "not a number"),
        ({"q": {"type": "poll"}}, {"q": True}, "not noul, choice or score"),
    ],
)
def test_a_hand_written_question_is_refused_naming_it(
    questions: Any, answer: Any, named: str
) -> None:
    message = _escalation(questions)
    with pytest.raises(ResolutionInvalid) as caught:
        check_resolution(message, answer)
    [problem] = caught.value.problems
    assert problem.field == "(escalation)" and named in problem.message
    assert questions_problem(message) == problem.message


def test_the_questions_the_worker_writes_are_readable() -> None:
    message = _escalation(
        {
            "a": {"type": "noul", "instructions": "?", "escalate_below": 0.7},
            "b": {"type": "choice", "instructions": "?", "criteria": {"x": None, "y": "why"}},
            "c": {"type": "score", "instructions": "?", "criteria": ["lo", "hi"],
                  "escalate_below": {"calibrated": True, "fallback": 0.6}},
        }
    )
    assert questions_problem(message) is None
    assert check_resolution(message, {"a": True, "b": "y", "c": "hi"}) == {
        "a": True, "b": "y", "c": 1
    }
