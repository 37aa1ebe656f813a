"""Whole response bodies in each API's shape, built from ``answers`` (pure, no I/O).

Each builder takes an already validated request body and the ids of the questions to
refuse. A System One refusal is a missing answer (TypeSafe documents no refusal type);
Parallel and OpenAI answer ``{"type": "refusal"}``. Ids are derived from the request digest
unless the caller passes one, so the same request gives the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from typing import Any

from shared.canonical import canonical_bytes
from shared.tokens import estimate_tokens

from . import wire
from .answers import answer_question, spoil_answer
from .catalog import price_per_token_usd

__all__ = [
    "openai_choice_key",
    "openai_question_id",
    "openai_question_to_system_one",
    "openai_response",
    "openrouter_response",
    "parallel_response",
    "system_one_answers",
    "system_one_response",
]

#: Made-up usage: a fixed cost per answer plus the envelope.
_OUTPUT_TOKENS_BASE = 4
_OUTPUT_TOKENS_PER_ANSWER = 6


def _input_tokens(body: Mapping[str, Any]) -> int:
    # The bytes a provider sends (canonical), counted as the worker's estimate counts them.
    return estimate_tokens(len(canonical_bytes(body)))


def _usage(body: Mapping[str, Any], answered: int) -> dict[str, Any]:
    return {
        "input_tokens": _input_tokens(body),
        "output_tokens": _OUTPUT_TOKENS_BASE + _OUTPUT_TOKENS_PER_ANSWER * answered,
    }


def _derived_id(prefix: str, body: Mapping[str, Any], length: int = 24) -> str:
    return prefix + hashlib.sha256(b"id\x00" + canonical_bytes(body)).hexdigest()[:length]


def system_one_answers(
    model: str,
    questions: Mapping[str, Mapping[str, Any]],
    state: Any,
    *,
    refused: Collection[str] = (),
    spoil: bool = False,
) -> dict[str, dict[str, Any]]:
    """Answers keyed by question id; refused ids are left out, as System One hosts do."""
    state_bytes = canonical_bytes(state)
    out: dict[str, dict[str, Any]] = {}
    for qid, question in questions.items():
        if qid in refused:
            continue
        answer = answer_question(model, question, state, state_bytes=state_bytes)
        out[qid] = spoil_answer(answer) if spoil else answer
    return out


def system_one_response(
    body: Mapping[str, Any], *, refused: Collection[str] = (), spoil: bool = False
) -> dict[str, Any]:
    """TypeSafe's shape: ``{model, answers, usage}`` (its request id travels as a header)."""
    model = body.get("model") or wire.DEFAULT_MODEL
    answers = system_one_answers(
        model, body["questions"], body["state"], refused=refused, spoil=spoil
    )
    return {"model": model, "answers": answers, "usage": _usage(body, len(answers))}


def openrouter_response(
    body: Mapping[str, Any],
    *,
    refused: Collection[str] = (),
    spoil: bool = False,
    request_id: str | None = None,
) -> dict[str, Any]:
    """OpenRouter: TypeSafe's shape plus ``id`` (``gen-dec-...``), ``provider``, ``usage.cost``."""
    response = system_one_response(body, refused=refused, spoil=spoil)
    usage = response["usage"]
    usage["cost"] = round(usage["input_tokens"] * price_per_token_usd(response["model"]), 12)
    return {
        "id": request_id or _derived_id(wire.OPENROUTER_ID_PREFIX, body),
        "provider": wire.OPENROUTER_PROVIDER_NAME,
        **response,
    }


def _state_text(state: Any) -> str:
    return state if isinstance(state, str) else canonical_bytes(state).decode("utf-8")


def _citations(body: Mapping[str, Any], include_excerpts: bool) -> list[dict[str, Any]]:
    seed = hashlib.sha256(b"citations\x00" + canonical_bytes(body)).hexdigest()
    excerpt = _state_text(body["state"])[:160]
    return [
        {
            # .invalid never resolves (RFC 6761): a consumer that follows it stays local.
            "url": f"https://faux.invalid/evidence/{seed[8 * i : 8 * i + 12]}",
            "title": f"Faux evidence {i + 1}",
            "excerpts": [excerpt] if include_excerpts else [],
        }
        for i in range(1 + int(seed[0], 16) % 3)
    ]


def parallel_response(
    body: Mapping[str, Any],
    *,
    refused: Collection[str] = (),
    spoil: bool = False,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Parallel's shape; field names beyond ``answers``/``citations`` are unconfirmed."""
    mode = body.get(wire.PARALLEL_MODE_FIELD) or wire.PARALLEL_MODES[0]
    answers: dict[str, dict[str, Any]] = system_one_answers(
        wire.PARALLEL_MODEL_PREFIX + mode, body["questions"], body["state"],
        refused=refused, spoil=spoil,
    )
    ordered = {qid: answers.get(qid, {"type": "refusal"}) for qid in body["questions"]}
    return {
        wire.PARALLEL_REQUEST_ID_FIELD: request_id
        or _derived_id(wire.PARALLEL_REQUEST_ID_PREFIX, body, 32),
        wire.PARALLEL_MODE_FIELD: mode,
        "answers": ordered,
        wire.PARALLEL_CITATIONS_FIELD: _citations(body, body.get("include_excerpts", True)),
    }


def openai_choice_key(value: str | bool) -> str:
    """The criteria key of an OpenAI choice value (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def openai_question_id(question: Mapping[str, Any], index: int) -> str:
    """What ``refuse_questions`` matches for an OpenAI question: its name, else its index."""
    name = question.get("name")
    return name if isinstance(name, str) else str(index)


def openai_question_to_system_one(question: Mapping[str, Any]) -> dict[str, Any]:
    """The same question in the System One shape (predicate is noul; choices, levels: criteria).

    Answers are drawn from this form, so a question asked through either API gets the same
    answer.
    """
    kind = question["type"]
    instructions = question["instructions"]
    if kind == "predicate":
        return {"type": "noul", "instructions": instructions}
    if kind == "choice":
        criteria = {
            openai_choice_key(c["value"]): c.get("description") for c in question["choices"]
        }
        return {"type": "choice", "instructions": instructions, "criteria": criteria}
    if kind == "score":
        levels = [level["label"] for level in question["levels"]]
        return {"type": "score", "instructions": instructions, "criteria": levels}
    raise ValueError(f"unknown question type {kind!r}")


def _openai_answer(question: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    name = question.get("name")
    kind = question["type"]
    if kind == "predicate":
        return {"type": "predicate", "name": name, "probability": answer["noul"]}
    if kind == "choice":
        values = {openai_choice_key(c["value"]): c["value"] for c in question["choices"]}
        return {
            "type": "choice",
            "name": name,
            "choice": values[answer["choice"]],
            "confidence": answer["confidence"],
            "probabilities": [
                {"value": values[key], "probability": p}
                for key, p in answer["probabilities"].items()
            ],
        }
    return {
        "type": "score",
        "name": name,
        "score": answer["score"],
        "confidence": answer["confidence"],
        "probabilities": [
            {"value": int(i), "label": answer["legend"][i], "probability": p}
            for i, p in answer["probabilities"].items()
        ],
    }


def openai_response(
    body: Mapping[str, Any],
    *,
    refused: Collection[str] = (),
    spoil: bool = False,
    request_id: str | None = None,
) -> dict[str, Any]:
    """OpenAI Decisions: ``answers`` is an array in the order of ``questions``."""
    model = body["model"]
    state = body["input"]
    state_bytes = canonical_bytes(state)
    answers: list[dict[str, Any]] = []
    for index, question in enumerate(body["questions"]):
        if openai_question_id(question, index) in refused:
            answers.append({"type": "refusal", "name": question.get("name")})
            continue
        answer = answer_question(
            model, openai_question_to_system_one(question), state, state_bytes=state_bytes
        )
        answers.append(_openai_answer(question, spoil_answer(answer) if spoil else answer))
    answered = sum(1 for a in answers if a["type"] != "refusal")
    return {
        wire.OPENAI_ID_FIELD: request_id or _derived_id(wire.OPENAI_ID_PREFIX, body, 32),
        "object": wire.OPENAI_OBJECT,
        "model": model,
        "answers": answers,
        "usage": _usage(body, answered),
    }
