"""Decode and check answers in the System One shape, for every provider.

Parallel answers in this shape, and OpenAI's array answers are mapped into it first, so one
set of rules holds everywhere:

- A question answered ``{"type": "refusal"}`` is *refused*: ``Answer(refused=True,
  value=None)``. A refusal never decodes to a value.
- A question missing from ``answers`` follows the provider's documented rule
  (``MissingAnswer``), one table for every provider:

  =====================  ====================  =============================================
  provider               missing answer        why
  =====================  ====================  =============================================
  ``parallel``           ``invalid_response``  Parallel refuses explicitly
                                               (``{"type": "refusal"}``); a question left
                                               out is an answer set that does not match the
                                               questions (seed 004, "Errors")
  ``openai``             ``invalid_response``  OpenAI documents an explicit refusal answer
                                               (``{"type": "refusal", "name"}``)
  ``systemone``          ``refused``           TypeSafe documents no refusal type; System
                                               One hosts (OpenRouter, TypeSafe, the faux,
                                               every configured host) leave a refused
                                               question out. A host that turns a refusal
                                               into an HTTP error (NVIDIA) fails before
                                               decoding, by its status
  =====================  ====================  =============================================

  ``tests/providers/test_missing_answers.py`` keeps this table and the providers' classes
  (``HttpDecisionProvider.missing_answer``) equal.
- Anything that does not fit the question asked is ``invalid_response``: a wrong ``type``,
  a mistyped value, an option or level that was not offered, probabilities that do not sum
  to 1 within ``PROBABILITY_SUM_TOLERANCE`` (hosts round to two decimals), a choice that is
  not (within rounding) the most probable option, a score that is not the probability-
  weighted level index within rounding, or an answer to a question that was not asked.
- ``noul``: ``value = p >= 0.5``, ``probability = p``, confidence ``2 * |p - 0.5|``, derived.
- ``choice`` / ``score`` without a confidence: derived as the *margin*, the top probability
  minus the runner-up (``derived_confidence``). For two options that is exactly the noul
  formula (``p - (1 - p) = 2p - 1``), so a yes/no asked as a noul or as a two-option choice
  gets the same confidence; the max probability alone would call a 0.5/0.5 split "0.5
  confident". A reported confidence is kept, ``confidence_source: "reported"``.
- A score's ``label`` is the nearest level's (half up); its ``probability`` is that level's.

Error messages name the question id and what is wrong, never a value from the response.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from shared.errors import DecisionProviderError
from shared.replies import Answer

__all__ = [
    "PROBABILITY_SUM_TOLERANCE",
    "MissingAnswer",
    "decode_answers",
    "derived_confidence",
    "score_tolerance",
]

#: What a question left out of ``answers`` means: a refusal, or a response that does not
#: match the questions (``invalid_response``). The table above says which provider has which.
MissingAnswer = Literal["refused", "invalid_response"]

#: Probabilities are rounded to two decimals, so their sum drifts by about 0.01.
PROBABILITY_SUM_TOLERANCE = 0.02
#: How far below the top probability the chosen option may be (both rounded).
_CHOICE_ARGMAX_TOLERANCE = 0.02
#: Largest error of one probability rounded to two decimals.
_ROUNDING = 0.005
#: Slack on every tolerance for binary floats: hundredths summing to 0.98 are
#: 0.020000000000000018 from 1, and 0.23 - 0.02 is 0.21000000000000002, so a reported value
#: exactly at a tolerance was refused.
_FLOAT_SLACK = 1e-9


class _Invalid(Exception):
    """An answer does not fit its question; turned into ``invalid_response`` with the id."""


def derived_confidence(probabilities: Mapping[str, float]) -> float:
    """The margin between the two most probable options (0 when tied, 1 when certain)."""
    ranked = sorted(probabilities.values(), reverse=True)
    top = ranked[0] if ranked else 0.0
    second = ranked[1] if len(ranked) > 1 else 0.0
    return _clamp(top - second)


def score_tolerance(levels: int) -> float:
    """How far ``score`` may be from ``sum(i * p_i)`` when each ``p_i`` is rounded to 0.01.

    Each rounded ``p_i`` is off by at most 0.005, so the weighted sum is off by at most
    ``0.005 * sum(i)``; the score itself is rounded too (another 0.005).
    """
    return _ROUNDING * levels * (levels - 1) / 2 + _ROUNDING + _FLOAT_SLACK


def decode_answers(
    questions: Mapping[str, Mapping[str, Any]],
    answers: Any,
    *,
    provider: str,
    missing: MissingAnswer,
) -> dict[str, Answer]:
    """Every asked question's ``Answer`` (refused where refused, or where missing when
    ``missing`` is ``"refused"``), or raise ``invalid_response``."""
    if not isinstance(answers, dict):
        raise _invalid(provider, "the response has no answers object")
    unasked = sum(1 for qid in answers if qid not in questions)
    if unasked:
        # Counted, never quoted: the ids are the host's words, and an attack named three
        # of them by pieces of the key it was sent, each too short for a scrub to know.
        raise _invalid(provider, f"answers to {unasked} question(s) not asked")
    if missing == "invalid_response":
        left_out = [qid for qid in questions if answers.get(qid) is None]
        if left_out:
            raise _invalid(
                provider,
                f"answers do not match the questions: no answer to {', '.join(left_out)} "
                "(this provider refuses with an explicit refusal answer)",
            )
    decoded: dict[str, Answer] = {}
    for qid, question in questions.items():
        try:
            decoded[qid] = _decode_one(question, answers.get(qid))
        except _Invalid as exc:
            raise _invalid(provider, f"answers.{qid}: {exc}") from None
    return decoded


def _invalid(provider: str, message: str) -> DecisionProviderError:
    return DecisionProviderError("invalid_response", message, provider=provider)


def _decode_one(question: Mapping[str, Any], raw: Any) -> Answer:
    qtype = question["type"]
    if raw is None:
        return _refused(qtype)
    if not isinstance(raw, dict):
        raise _Invalid("an answer must be an object")
    rtype = raw.get("type")
    if rtype == "refusal":
        return _refused(qtype)
    if rtype != qtype:
        raise _Invalid(f"answer of type {_kind(rtype)} to a {qtype} question")
    if qtype == "noul":
        return _noul(raw)
    if qtype == "choice":
        return _choice(question, raw)
    if qtype == "score":
        return _score(question, raw)
    raise _Invalid(f"questions of type {qtype} cannot be decoded")


def _refused(qtype: Any) -> Answer:
    return Answer(type=qtype, value=None, probability=None, label=None, refused=True)


def _noul(raw: Mapping[str, Any]) -> Answer:
    p = _probability(raw.get("noul"), "noul")
    reported = _reported_confidence(raw)
    return Answer(
        type="noul",
        value=p >= 0.5,
        probability=p,
        confidence=reported if reported is not None else _clamp(2 * abs(p - 0.5)),
        confidence_source="reported" if reported is not None else "derived",
        label=None,
    )


def _choice(question: Mapping[str, Any], raw: Mapping[str, Any]) -> Answer:
    options = [str(o) for o in question.get("criteria") or {}]
    choice = raw.get("choice")
    if not isinstance(choice, str):
        raise _Invalid("choice must be a string")
    if choice not in options:
        raise _Invalid("choice is not one of the options offered")
    probabilities = _distribution(raw.get("probabilities"), options, "option")
    top = max(probabilities.values())
    if probabilities[choice] < top - _CHOICE_ARGMAX_TOLERANCE - _FLOAT_SLACK:
        raise _Invalid("choice is not the most probable option")
    return _with_confidence(
        raw,
        type="choice",
        value=choice,
        probability=probabilities[choice],
        probabilities=probabilities,
        label=None,
    )


def _score(question: Mapping[str, Any], raw: Mapping[str, Any]) -> Answer:
    levels = [str(level) for level in question.get("criteria") or []]
    n = len(levels)
    score = _number(raw.get("score"), "score")
    tolerance = score_tolerance(n)
    if not -tolerance <= score <= n - 1 + tolerance:
        raise _Invalid("score is outside the levels")
    keys = [str(i) for i in range(n)]
    probabilities = _distribution(raw.get("probabilities"), keys, "level")
    legend = raw.get("legend")
    if legend is not None and (
        not isinstance(legend, dict) or any(k not in keys for k in legend)
    ):
        raise _Invalid("legend names levels that were not offered")
    expected = sum(i * probabilities[k] for i, k in enumerate(keys))
    if abs(score - expected) > tolerance:
        raise _Invalid("score is inconsistent with its probabilities")
    nearest = min(max(math.floor(score + 0.5), 0), n - 1)
    return _with_confidence(
        raw,
        type="score",
        value=score,
        probability=probabilities[keys[nearest]],
        probabilities=probabilities,
        label=levels[nearest],
    )


def _with_confidence(raw: Mapping[str, Any], **fields: Any) -> Answer:
    reported = _reported_confidence(raw)
    confidence = reported if reported is not None else derived_confidence(fields["probabilities"])
    return Answer(
        confidence=confidence,
        confidence_source="reported" if reported is not None else "derived",
        **fields,
    )


def _distribution(raw: Any, keys: list[str], what: str) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise _Invalid("probabilities must be a non-empty object")
    if any(k not in keys for k in raw):
        raise _Invalid(f"probabilities name an {what} that was not offered")
    out = {k: _probability(raw.get(k, 0.0), "probability") for k in keys}
    if abs(sum(out.values()) - 1.0) > PROBABILITY_SUM_TOLERANCE + _FLOAT_SLACK:
        raise _Invalid(f"probabilities do not sum to 1 (within {PROBABILITY_SUM_TOLERANCE})")
    return out


def _reported_confidence(raw: Mapping[str, Any]) -> float | None:
    value = raw.get("confidence")
    return None if value is None else _probability(value, "confidence")


def _probability(value: Any, what: str) -> float:
    number = _number(value, what)
    if not -_FLOAT_SLACK <= number <= 1 + _FLOAT_SLACK:
        raise _Invalid(f"{what} must be between 0 and 1")
    return _clamp(number)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"{what} must be a number, not {_kind(value)}")
    if not math.isfinite(value):
        raise _Invalid(f"{what} must be finite")
    return float(value)


def _clamp(value: float) -> float:
    # Rounded so that 0.61 - 0.39 reads 0.22, not 0.21999999999999997.
    return round(min(1.0, max(0.0, value)), 6)


def _kind(value: Any) -> str:
    """A value's JSON kind, for messages that must not echo the value itself."""
    if isinstance(value, str):
        return "a string" if value not in {"noul", "choice", "score", "refusal"} else value
    return {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__
    )
