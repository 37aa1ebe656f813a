"""The answer form of a decide escalation, built from its questions, and its reading back.

One field per question: yes/no, the choice's options, the score's levels. What a field
sends is only a proposal: the answer is checked by ``EscalationQueue.resolve`` (that is,
``shared.resolutions.check_resolution``), the same code as ``decisions escalations resolve``,
so an option that is not in the question (a tampered form) is refused there, not here.
Whether a question must be answered is asked of that code too (``required``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import ResolutionInvalid
from shared.replies import Answer, EscalationMessage
from shared.resolutions import check_resolution

__all__ = ["KEEP", "DecideField", "FieldChoice", "decide_answer", "decide_fields"]

#: The form value meaning "leave the machine's answer" (an empty string: nothing sent).
KEEP: Final = ""
_INDEX = re.compile(r"^\d{1,3}$")


@dataclass(frozen=True)
class FieldChoice:
    value: str
    label: str
    description: str | None = None


@dataclass(frozen=True)
class DecideField:
    """One question of the form: ``name`` is the form field, ``problem_key`` the problem's."""

    name: str
    question_id: str
    type: str
    instructions: str
    choices: tuple[FieldChoice, ...]
    required: bool
    machine: Answer | None
    escalate_below: float | None

    @property
    def problem_key(self) -> str:
        return f"answer.{self.question_id}"


def decide_fields(message: EscalationMessage) -> list[DecideField]:
    questions: Mapping[str, Any] = message.context.get("questions") or {}
    required = _required(message)
    answers = message.answers or {}
    fields = []
    for i, (qid, question) in enumerate(questions.items()):
        fields.append(
            DecideField(
                name=f"q{i}",
                question_id=qid,
                type=str(question.get("type")),
                instructions=_text(question.get("instructions")),
                choices=_choices(question),
                required=f"answer.{qid}" in required,
                machine=answers.get(qid),
                escalate_below=question.get("escalate_below"),
            )
        )
    return fields


def decide_answer(fields: list[DecideField], form: Mapping[str, str]) -> dict[str, Any]:
    """``{question_id: value}`` from the form; fields left at ``KEEP`` are not sent."""
    answer: dict[str, Any] = {}
    for field in fields:
        raw = form.get(field.name, KEEP)
        if raw == KEEP:
            continue
        answer[field.question_id] = _value(field.type, raw)
    return answer


def _required(message: EscalationMessage) -> set[str]:
    # Answering nothing: the only problems are the questions that need a reviewer's value.
    try:
        check_resolution(message, {})
    except ResolutionInvalid as exc:
        return {p.field for p in exc.problems}
    return set()


def _value(kind: str, raw: str) -> Any:
    if kind == "noul":
        return {"true": True, "false": False}.get(raw, raw)
    if kind == "score" and _INDEX.match(raw):
        return int(raw)
    return raw


def _choices(question: Mapping[str, Any]) -> tuple[FieldChoice, ...]:
    kind = question.get("type")
    criteria = question.get("criteria")
    if kind == "noul":
        described = criteria if isinstance(criteria, Mapping) else {}
        return (
            FieldChoice("true", "yes", described.get("true")),
            FieldChoice("false", "no", described.get("false")),
        )
    if kind == "choice" and isinstance(criteria, Mapping):
        return tuple(FieldChoice(str(k), str(k), v) for k, v in criteria.items())
    if kind == "score" and isinstance(criteria, list):
        return tuple(FieldChoice(str(i), f"{i}: {level}") for i, level in enumerate(criteria))
    return ()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)
