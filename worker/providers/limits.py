"""Limits checked before anything is sent: a violation is ``invalid_request`` naming the field.

Sizes are measured on what goes on the wire:

- A question's *rendered* size is the length in characters (code points, not bytes) of its
  canonical JSON (``shared.canonical``), exactly as the provider will receive it, after any
  rewriting the provider does first (Parallel's option descriptions filled in). The
  question's id is not part of it: ids are the caller's and are not shown to the model.
- The state's size is the UTF-8 length of a string state itself, or of the canonical JSON of
  an object or array state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.canonical import canonical_bytes
from shared.errors import DecisionProviderError
from worker.providers.base import ProviderLimits

__all__ = ["check_limits", "check_shapes", "rendered_length", "state_bytes"]

_TYPES = ("noul", "choice", "score")


def rendered_length(question: Mapping[str, Any]) -> int:
    return len(canonical_bytes(question).decode("utf-8"))


def state_bytes(state: Any) -> int:
    if isinstance(state, str):
        return len(state.encode("utf-8"))
    return len(canonical_bytes(state))


def _refuse(provider: str, field: str, message: str) -> DecisionProviderError:
    return DecisionProviderError(
        "invalid_request", f"{field}: {message}; nothing was sent", provider=provider, field=field
    )


def check_shapes(
    state: Any, questions: Mapping[str, Mapping[str, Any]], *, provider: str
) -> None:
    """The System One shapes, for callers that built a request without ``shared.jobs``."""
    if not isinstance(state, str | dict | list):
        raise _refuse(provider, "state", "must be a string, an object or an array")
    if not isinstance(questions, Mapping) or not questions:
        raise _refuse(provider, "questions", "at least one question is required")
    for qid, question in questions.items():
        field = f"questions.{qid}"
        if not isinstance(qid, str) or not qid.strip():
            raise _refuse(provider, "questions", "question ids must be non-empty strings")
        if not isinstance(question, Mapping) or question.get("type") not in _TYPES:
            raise _refuse(provider, f"{field}.type", "must be noul, choice or score")
        instructions = question.get("instructions")
        if not isinstance(instructions, str | dict | list):
            raise _refuse(provider, f"{field}.instructions", "must be a string, object or array")
        criteria = question.get("criteria")
        kind = question["type"]
        if kind == "choice" and not (
            isinstance(criteria, Mapping)
            and all(isinstance(k, str) and (v is None or isinstance(v, str))
                    for k, v in criteria.items())
        ):
            raise _refuse(provider, f"{field}.criteria", "must map option -> description or null")
        if kind == "score" and not (
            isinstance(criteria, list) and all(isinstance(v, str) for v in criteria)
        ):
            raise _refuse(provider, f"{field}.criteria", "must be a list of level labels")
        if kind == "noul" and criteria is not None and not isinstance(criteria, Mapping):
            raise _refuse(provider, f"{field}.criteria", "must be {true?, false?}")


def check_limits(
    state: Any,
    questions: Mapping[str, Mapping[str, Any]],
    limits: ProviderLimits,
    *,
    provider: str,
) -> None:
    """Raise ``invalid_request`` (with ``field``) for the first limit ``questions`` break.

    ``questions`` must be the questions as they will be sent.
    """
    check_shapes(state, questions, provider=provider)
    if limits.max_questions is not None and len(questions) > limits.max_questions:
        raise _refuse(
            provider, "questions",
            f"{len(questions)} questions; at most {limits.max_questions} are allowed",
        )
    for qid, question in questions.items():
        field = f"questions.{qid}"
        criteria = question.get("criteria")
        if question["type"] == "choice":
            n = len(criteria or {})
            if not limits.min_choice_options <= n <= limits.max_choice_options:
                raise _refuse(
                    provider, f"{field}.criteria",
                    f"{n} options; {limits.min_choice_options} to "
                    f"{limits.max_choice_options} are allowed",
                )
        elif question["type"] == "score":
            n = len(criteria or [])
            if not limits.min_score_levels <= n <= limits.max_score_levels:
                raise _refuse(
                    provider, f"{field}.criteria",
                    f"{n} levels; {limits.min_score_levels} to "
                    f"{limits.max_score_levels} are allowed",
                )
        cap = limits.max_rendered_question_chars
        if cap is not None:
            length = rendered_length(question)
            if length > cap:
                raise _refuse(
                    provider, field, f"renders to {length} characters; at most {cap}"
                )
    if limits.max_state_bytes is not None:
        size = state_bytes(state)
        if size > limits.max_state_bytes:
            raise _refuse(
                provider, "state", f"{size} bytes; at most {limits.max_state_bytes}"
            )
