"""The answer form of a decide escalation, built from its questions, and its reading back.

One field per question: yes/no, the choice's options, the score's levels. What a field
sends is only a proposal: the answer is checked by ``EscalationQueue.resolve`` (that is,
``shared.resolutions.check_resolution``), the same code as ``decisions escalations resolve``,
so an option that is not in the question (a tampered form) is refused there, not here.
Whether a question must be answered is asked of that code too (``required``). Questions of
another shape than that code reads (``shared.resolutions.questions_problem``: a damaged or
hand-written entry) make no form: the pages list such an entry as unreadable.

A big escalation (a sift's items, or more questions than ``PAGE_SIZE``) is shown a page at a
time with a bulk answer (``BULK_CHOICES``: keep the machine's answers, yes or no for the
rest or for all); the fields shown on the page override it. The answer is built from the
bulk choice and the overrides, so a form never carries more than a page of fields, whatever
the escalation's size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import ResolutionInvalid
from shared.judgments.requests import item_index
from shared.questions import fixed_floor
from shared.replies import Answer, EscalationMessage
from shared.resolutions import check_resolution

__all__ = [
    "BULK_CHOICES",
    "BULK_FIELD",
    "KEEP",
    "MACHINE",
    "OPTION_PREFIX",
    "PAGE_SIZE",
    "DecideField",
    "FieldChoice",
    "Paged",
    "decide_answer",
    "decide_fields",
    "paged",
    "uses_bulk",
]

#: The form value meaning "leave the machine's answer" (an empty string: nothing sent), or
#: on a bulk form "as the bulk choice says".
KEEP: Final = ""
#: On a bulk form: keep the machine's answer to this one, whatever the bulk choice.
MACHINE: Final = "machine"
#: Before a choice's option in its form value: an option may be named anything, "machine"
#: too, and must never read back as a marker (an attack's option named "machine" published
#: the machine's answer when a reviewer picked it).
OPTION_PREFIX: Final = "="
BULK_FIELD: Final = "bulk"
#: (form value, label): what applies to every question not set on the page.
BULK_CHOICES: Final = (
    ("keep", "keep the machine's answers; answer the others on the pages"),
    ("keep-false", "keep the machine's answers; every other one: no"),
    ("keep-true", "keep the machine's answers; every other one: yes"),
    ("false", "every one: no"),
    ("true", "every one: yes"),
)
#: Questions (sift items) shown on one page of a big escalation.
PAGE_SIZE: Final = 100
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
    #: A sift item's index and the item itself (text, or compact JSON); None otherwise.
    item_index: int | None = None
    item_text: str | None = None

    @property
    def problem_key(self) -> str:
        return f"answer.{self.question_id}"


def decide_fields(message: EscalationMessage) -> list[DecideField]:
    questions: Mapping[str, Any] = message.context.get("questions") or {}
    required = _required(message)
    answers = message.answers or {}
    fields = []
    sift = message.kind == "sift"
    for i, (qid, question) in enumerate(questions.items()):
        instructions = question.get("instructions")
        item = instructions.get("item") if sift and isinstance(instructions, Mapping) else None
        fields.append(
            DecideField(
                name=f"q{i}",
                question_id=qid,
                type=str(question.get("type")),
                # A sift's items share one question, shown once (and 10,000 indented dumps
                # of it would take seconds).
                instructions="" if sift else _text(instructions),
                choices=_choices(question),
                required=f"answer.{qid}" in required,
                machine=answers.get(qid),
                escalate_below=_floor_used(message, qid, question),
                item_index=item_index(qid) if sift else None,
                item_text=None if item is None else _compact(item),
            )
        )
    return fields


def _floor_used(message: EscalationMessage, qid: str, question: Mapping[str, Any]) -> float | None:
    """The floor the answer was judged by: a calibrated one's, as the receipt names it."""
    for receipt in message.receipts:
        if receipt.thresholds and qid in receipt.thresholds:
            return receipt.thresholds[qid].value
    return fixed_floor(question.get("escalate_below"))


def uses_bulk(message: EscalationMessage, fields: list[DecideField]) -> bool:
    """Whether the form is paged with a bulk answer: a sift, or many questions."""
    return message.kind == "sift" or len(fields) > PAGE_SIZE


@dataclass(frozen=True)
class Paged:
    shown: list[DecideField]
    page: int
    pages: int


def paged(fields: list[DecideField], page: int) -> Paged:
    """The fields of page ``page`` (1-based, clamped to the pages there are)."""
    pages = max(1, -(-len(fields) // PAGE_SIZE))
    page = min(max(1, page), pages)
    return Paged(fields[(page - 1) * PAGE_SIZE : page * PAGE_SIZE], page, pages)


def decide_answer(fields: list[DecideField], form: Mapping[str, str]) -> dict[str, Any]:
    """``{question_id: value}`` from the form: each field set on it, then the bulk choice
    (if the form has one) for the others; what is left is not sent (the machine's stands)."""
    bulk = form.get(BULK_FIELD, "")
    keep_machine = bulk.startswith("keep")
    fill = bulk.removeprefix("keep-") if bulk != "keep" else ""
    answer: dict[str, Any] = {}
    for field in fields:
        raw = form.get(field.name, KEEP)
        if raw == MACHINE:
            continue
        machine = _machine_value(field.machine)
        if raw != KEEP:
            answer[field.question_id] = _value(field.type, raw)
        elif keep_machine and machine is not None:
            # Sent only where the escalation needs a value (e.g. an interrupted call, one
            # below its floor): otherwise leaving it out keeps the machine's answer anyway.
            if field.required:
                answer[field.question_id] = machine
        elif fill in ("true", "false") and field.type == "noul":
            answer[field.question_id] = fill == "true"
    return answer


def _machine_value(answer: Answer | None) -> Any:
    """The machine's answer as a reviewer would send it (a score by its label); None: none."""
    if answer is None or answer.refused or answer.value is None:
        return None
    if answer.type == "score":
        return answer.label
    return answer.value


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
    if kind == "choice":
        # One prefix off (an option named "=x" is sent as "==x"); a value without one is
        # not the form's (a tampered or scripted post) and goes to resolve as it is.
        return raw.removeprefix(OPTION_PREFIX)
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
        return tuple(FieldChoice(OPTION_PREFIX + str(k), str(k), v) for k, v in criteria.items())
    if kind == "score" and isinstance(criteria, list):
        return tuple(FieldChoice(str(i), f"{i}: {level}") for i, level in enumerate(criteria))
    return ()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
