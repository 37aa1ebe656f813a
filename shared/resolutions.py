"""Checking a reviewer's answer against the escalation it answers, before it is published.

A decide escalation is answered per question: ``{"department": "billing", "is_urgent": true,
"frustration": 2}`` (a score by level index or label). The questions the machine could not
answer (refused, missing, below their floor, or all of them when the call failed) must be
answered; the others may be, overriding the machine. A menu escalation is answered by a pick,
parsed and validated by the menu engine itself (see ``shared.menus``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.errors import FieldProblem, ResolutionInvalid
from shared.menus.escalated import menu_problem
from shared.questions import fixed_floor
from shared.replies import Answer, EscalationMessage

__all__ = ["MenuAnswerChecker", "answer_problem", "check_resolution", "questions_problem"]

#: Validates a reviewer's pick for a menu escalation; returns the resolved value.
MenuAnswerChecker = Callable[[EscalationMessage, Any], Any]

_PER_QUESTION_REASONS = {"decision_refused", "low_confidence"}


def check_resolution(
    escalation: EscalationMessage, answer: Any, *, menu_checker: MenuAnswerChecker | None = None
) -> Any:
    """The resolved answer to publish; ``ResolutionInvalid`` naming each bad field otherwise."""
    if escalation.kind == "menu":
        if menu_checker is None:
            raise ResolutionInvalid([FieldProblem("answer", "menu answers need the menu engine")])
        return menu_checker(escalation, answer)
    unreadable = questions_problem(escalation)
    if unreadable is not None:
        raise ResolutionInvalid([FieldProblem("(escalation)", unreadable)])
    questions: dict[str, Any] = escalation.context.get("questions", {})
    if not isinstance(answer, dict):
        raise ResolutionInvalid([FieldProblem("answer", "an object of question id to value")])
    problems: list[FieldProblem] = []
    resolved: dict[str, Any] = {}
    needed = _needed(escalation)  # once: per question it made a 10,000-item sift take minutes
    for qid in sorted(set(answer) - set(questions)):
        problems.append(FieldProblem(f"answer.{qid}", "no such question"))
    for qid, question in questions.items():
        if qid in answer:
            value, problem = _check_value(question, answer[qid])
            if problem:
                problems.append(FieldProblem(f"answer.{qid}", problem))
            else:
                resolved[qid] = value
        elif qid in needed:
            problems.append(FieldProblem(f"answer.{qid}", "a value is required"))
        else:
            machine = (escalation.answers or {})[qid]
            resolved[qid] = machine.value
    if problems:
        raise ResolutionInvalid(problems)
    return resolved


def answer_problem(escalation: EscalationMessage) -> str | None:
    """Why no reviewer's answer could be checked against this escalation (None: one can): its
    menu cannot be rebuilt, or its questions cannot be read. What the reviewers' queue, its
    list and the console skip, one rule for all (``shared.escalation_entries``)."""
    if escalation.kind == "menu":
        return menu_problem(escalation)
    return questions_problem(escalation)


def questions_problem(escalation: EscalationMessage) -> str | None:
    """Why a decide escalation's questions cannot be resolved (None: they can).

    The worker writes them as its jobs' questions; an escalation entry is anyone's to write,
    though, and other JSON there (criteria that are a number, levels that are not text, a
    floor that is a string) made the check below fail with a TypeError, a "bug" to whoever
    resolved it. The console lists such an entry as unreadable for the same reason."""
    questions = escalation.context.get("questions", {})
    if not isinstance(questions, dict):
        return "its questions are not an object: it cannot be resolved"
    for qid, question in questions.items():
        problem = _question_problem(question)
        if problem is not None:
            return f"its question {str(qid)[:80]!r} {problem}: it cannot be resolved"
    return None


def _question_problem(question: Any) -> str | None:
    if not isinstance(question, dict):
        return "is not an object"
    kind, criteria = question.get("type"), question.get("criteria")
    if kind == "choice" and not (isinstance(criteria, dict) and criteria):
        return "is a choice without an object of options"
    if kind == "score" and not (
        isinstance(criteria, list) and criteria and all(isinstance(c, str) for c in criteria)
    ):
        return "is a score without a list of levels"
    if kind not in ("noul", "choice", "score"):
        return f"has the type {str(kind)[:40]!r}, not noul, choice or score"
    floor = fixed_floor(question.get("escalate_below"))
    if not (floor is None or (isinstance(floor, int | float) and not isinstance(floor, bool))):
        return "has an escalate_below that is not a number"
    return None


def _needed(escalation: EscalationMessage) -> set[str]:
    questions: dict[str, Any] = escalation.context.get("questions", {})
    if escalation.reason not in _PER_QUESTION_REASONS or not escalation.answers:
        return set(questions)
    # A calibrated floor is the number the deciding call's receipt says it was judged by.
    used: dict[str, float] = {}
    for receipt in escalation.receipts:
        used.update({qid: t.value for qid, t in (receipt.thresholds or {}).items()})
    answers = escalation.answers
    return {
        qid
        for qid, q in questions.items()
        if not _usable(answers.get(qid), used.get(qid, fixed_floor(q.get("escalate_below"))))
    }


def _usable(answer: Answer | None, floor: float | None) -> bool:
    if answer is None or answer.refused or answer.value is None:
        return False
    return floor is None or (answer.confidence is not None and answer.confidence >= floor)


def _check_value(question: dict[str, Any], value: Any) -> tuple[Any, str | None]:
    kind = question.get("type")
    if kind == "noul":
        if isinstance(value, bool):
            return value, None
        return None, "yes/no: true or false"
    if kind == "choice":
        options = list(question.get("criteria", {}))
        if isinstance(value, str) and value in options:
            return value, None
        return None, f"one of {', '.join(options)}"
    if kind == "score":
        levels: list[str] = list(question.get("criteria", []))
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(levels):
            return value, None
        if isinstance(value, str) and value in levels:
            return levels.index(value), None
        return None, f"a level index 0 to {len(levels) - 1} or one of {', '.join(levels)}"
    return None, f"unknown question type {kind!r}"
