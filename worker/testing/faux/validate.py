"""Request validation as a strict host does it, so a malformed request fails in CI too.

Each check raises ``RequestProblem`` naming the first bad field; the app turns it into the
flavour's status and error envelope. Limits are each API's documented ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from . import wire

__all__ = [
    "RequestProblem",
    "check_openai",
    "check_parallel",
    "check_system_one",
]

_MAX_CHOICE_OPTIONS: Final = 255
_MIN_SCORE_LEVELS: Final = 2
_MAX_SCORE_LEVELS: Final = 10
_PARALLEL_MAX_QUESTIONS: Final = 100

_SYSTEM_ONE_FIELDS: Final = frozenset({"model", "state", "questions", "assets"})
_QUESTION_FIELDS: Final = frozenset({"type", "instructions", "criteria"})
_OPENAI_QUESTION_FIELDS: Final = {
    "predicate": frozenset({"type", "name", "instructions"}),
    "choice": frozenset({"type", "name", "instructions", "choices"}),
    "score": frozenset({"type", "name", "instructions", "levels"}),
}

Loc = tuple[str | int, ...]


class RequestProblem(Exception):
    """The request is invalid: ``message`` says why, ``loc`` where (a JSON path)."""

    def __init__(self, message: str, loc: Loc = ()) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc


def _require_object(value: Any, loc: Loc, what: str = "an object") -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RequestProblem(f"must be {what}", loc)
    return value


def _check_state(body: Mapping[str, Any], key: str = "state") -> None:
    if key not in body:
        raise RequestProblem("field required", (key,))
    if not isinstance(body[key], str | dict | list):
        raise RequestProblem("must be a string, an object or an array", (key,))


def _check_instructions(question: Mapping[str, Any], loc: Loc) -> None:
    if "instructions" not in question:
        raise RequestProblem("field required", (*loc, "instructions"))
    instructions = question["instructions"]
    if not isinstance(instructions, str | dict | list):
        raise RequestProblem("must be a string, an object or an array", (*loc, "instructions"))
    if isinstance(instructions, str) and not instructions.strip():
        raise RequestProblem("must not be empty", (*loc, "instructions"))


def _check_choice_criteria(criteria: Any, loc: Loc, min_options: int) -> None:
    criteria = _require_object(criteria, loc, "an object of option -> description")
    if not min_options <= len(criteria) <= _MAX_CHOICE_OPTIONS:
        raise RequestProblem(
            f"{len(criteria)} options; {min_options} to {_MAX_CHOICE_OPTIONS} allowed", loc
        )
    for option, description in criteria.items():
        if not option.strip():
            raise RequestProblem("option names must not be empty", loc)
        if description is not None and not isinstance(description, str):
            raise RequestProblem("a description is a string or null", (*loc, option))


def _check_score_levels(levels: Any, loc: Loc) -> None:
    if not isinstance(levels, list):
        raise RequestProblem("must be an array of levels, lowest first", loc)
    if not _MIN_SCORE_LEVELS <= len(levels) <= _MAX_SCORE_LEVELS:
        raise RequestProblem(
            f"{len(levels)} levels; {_MIN_SCORE_LEVELS} to {_MAX_SCORE_LEVELS} allowed", loc
        )
    for i, level in enumerate(levels):
        if not isinstance(level, str):
            raise RequestProblem("a level is a string", (*loc, i))


def _check_question(question: Any, loc: Loc, min_options: int) -> None:
    question = _require_object(question, loc)
    extra = set(question) - _QUESTION_FIELDS
    if extra:
        raise RequestProblem(f"unexpected field {sorted(extra)[0]!r}", loc)
    kind = question.get("type")
    _check_instructions(question, loc)
    criteria_loc = (*loc, "criteria")
    if kind == "noul":
        criteria = question.get("criteria")
        if criteria is None:
            return
        criteria = _require_object(criteria, criteria_loc)
        for key, value in criteria.items():
            if key not in ("true", "false"):
                raise RequestProblem(f"unexpected key {key!r}", criteria_loc)
            if value is not None and not isinstance(value, str):
                raise RequestProblem("a description is a string or null", (*criteria_loc, key))
    elif kind == "choice":
        if "criteria" not in question:
            raise RequestProblem("field required", criteria_loc)
        _check_choice_criteria(question["criteria"], criteria_loc, min_options)
    elif kind == "score":
        if "criteria" not in question:
            raise RequestProblem("field required", criteria_loc)
        _check_score_levels(question["criteria"], criteria_loc)
    else:
        raise RequestProblem("type must be one of 'noul', 'choice', 'score'", (*loc, "type"))


def _check_questions(
    body: Mapping[str, Any], *, min_options: int, max_questions: int | None
) -> None:
    if "questions" not in body:
        raise RequestProblem("field required", ("questions",))
    questions = _require_object(body["questions"], ("questions",), "an object of id -> question")
    if not questions:
        raise RequestProblem("at least one question is required", ("questions",))
    if max_questions is not None and len(questions) > max_questions:
        raise RequestProblem(
            f"{len(questions)} questions; at most {max_questions} allowed", ("questions",)
        )
    for qid, question in questions.items():
        _check_question(question, ("questions", qid), min_options)


def _check_model(body: Mapping[str, Any], *, required: bool) -> None:
    model = body.get("model")
    if model is None:
        if required:
            raise RequestProblem("field required", ("model",))
        return
    if not isinstance(model, str) or not model.strip():
        raise RequestProblem("must be a non-empty string", ("model",))


def check_system_one(body: Any, *, require_model: bool) -> Mapping[str, Any]:
    """A System One request (``{model, state, questions, assets?}``); returns the body."""
    body = _require_object(body, ())
    extra = set(body) - _SYSTEM_ONE_FIELDS
    if extra:
        raise RequestProblem(f"unexpected field {sorted(extra)[0]!r}", ())
    _check_model(body, required=require_model)
    _check_state(body)
    _check_questions(body, min_options=1, max_questions=None)
    return body


def check_parallel(body: Any) -> Mapping[str, Any]:
    """Parallel: the System One questions with its tighter limits (2+ options, <= 100)."""
    body = _require_object(body, ())
    mode = body.get(wire.PARALLEL_MODE_FIELD)
    if mode is not None and mode not in wire.PARALLEL_MODES:
        raise RequestProblem(
            f"mode must be one of {list(wire.PARALLEL_MODES)}", (wire.PARALLEL_MODE_FIELD,)
        )
    if not isinstance(body.get("include_excerpts", True), bool):
        raise RequestProblem("must be a boolean", ("include_excerpts",))
    _check_state(body)
    _check_questions(body, min_options=2, max_questions=_PARALLEL_MAX_QUESTIONS)
    return body


def _check_openai_input(body: Mapping[str, Any]) -> None:
    if "input" not in body:
        raise RequestProblem("field required", ("input",))
    value = body["input"]
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        raise RequestProblem("must be a string or a non-empty array of messages", ("input",))
    for i, message in enumerate(value):
        message = _require_object(message, ("input", i))
        if message.get("role") != "user":
            raise RequestProblem("only user messages are accepted", ("input", i, "role"))
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise RequestProblem("must be a string or an array of parts", ("input", i))
        for j, part in enumerate(content):
            part = _require_object(part, ("input", i, "content", j))
            if part.get("type") not in ("input_text", "input_image"):
                raise RequestProblem(
                    "part type must be input_text or input_image", ("input", i, "content", j)
                )


def _check_openai_question(question: Any, loc: Loc) -> None:
    question = _require_object(question, loc)
    kind = question.get("type")
    allowed = _OPENAI_QUESTION_FIELDS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        raise RequestProblem("type must be one of 'predicate', 'choice', 'score'", (*loc, "type"))
    extra = set(question) - allowed
    if extra:
        raise RequestProblem(f"unexpected field {sorted(extra)[0]!r}", loc)
    if "name" in question and not isinstance(question["name"], str):
        raise RequestProblem("must be a string", (*loc, "name"))
    if not isinstance(question.get("instructions"), str) or not question["instructions"].strip():
        raise RequestProblem("a non-empty string is required", (*loc, "instructions"))
    if kind == "choice":
        choices = question.get("choices")
        if not isinstance(choices, list) or not 2 <= len(choices) <= _MAX_CHOICE_OPTIONS:
            raise RequestProblem(f"2 to {_MAX_CHOICE_OPTIONS} choices", (*loc, "choices"))
        seen: set[str] = set()
        for i, choice in enumerate(choices):
            choice = _require_object(choice, (*loc, "choices", i))
            value = choice.get("value")
            if not isinstance(value, str | bool) or set(choice) - {"value", "description"}:
                raise RequestProblem("{value: string|boolean, description?}", (*loc, "choices", i))
            key = ("true" if value else "false") if isinstance(value, bool) else value
            if key in seen:
                raise RequestProblem("duplicate choice value", (*loc, "choices", i))
            seen.add(key)
    elif kind == "score":
        levels = question.get("levels")
        if not isinstance(levels, list) or not (
            _MIN_SCORE_LEVELS <= len(levels) <= _MAX_SCORE_LEVELS
        ):
            raise RequestProblem(
                f"{_MIN_SCORE_LEVELS} to {_MAX_SCORE_LEVELS} levels", (*loc, "levels")
            )
        for i, level in enumerate(levels):
            level = _require_object(level, (*loc, "levels", i))
            if not isinstance(level.get("label"), str) or set(level) - {"label", "description"}:
                raise RequestProblem("{label: string, description?}", (*loc, "levels", i))


def check_openai(body: Any) -> Mapping[str, Any]:
    """OpenAI Decisions: ``{model, input, questions: [...]}`` with unique question names."""
    body = _require_object(body, ())
    _check_model(body, required=True)
    _check_openai_input(body)
    questions = body.get("questions")
    if not isinstance(questions, list) or not questions:
        raise RequestProblem("a non-empty array is required", ("questions",))
    names: set[str] = set()
    for i, question in enumerate(questions):
        _check_openai_question(question, ("questions", i))
        name = question.get("name")
        if name is not None:
            if name in names:
                raise RequestProblem("duplicate question name", ("questions", i, "name"))
            names.add(name)
    return body
