"""Made-up but stable answers to System One questions.

An answer is drawn from SHA-256 of (model, question, state), each in canonical JSON, so the
same question about the same state always gets the same answer, on every machine and run,
whatever the key order or whitespace of the request. Answers are well-formed as the wire
facts describe them: probabilities in hundredths summing to exactly 1.00, a choice that is
the most probable option, a score that is the probability-weighted level index.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any, Final

from shared.canonical import canonical_bytes

__all__ = ["BAD_NOUL", "BAD_PROBABILITY_MASS", "answer_question", "spoil_answer"]

#: ``bad_probabilities``: choice/score probabilities sum to this instead of 1.
BAD_PROBABILITY_MASS: Final = 0.7
#: ``bad_probabilities``: a noul has no sum to spoil, so it comes back out of [0, 1].
BAD_NOUL: Final = 1.7

_HUNDRED: Final = 100


class _Draws:
    """Uniform floats in [0, 1) from a seed: SHA-256 in counter mode, 4 draws per block."""

    __slots__ = ("_block", "_counter", "_pending", "_seed")

    def __init__(self, seed: bytes) -> None:
        self._seed = seed
        self._counter = 0
        self._pending: list[float] = []

    def next(self) -> float:
        if not self._pending:
            block = hashlib.sha256(self._seed + self._counter.to_bytes(4, "big")).digest()
            self._counter += 1
            self._pending = [
                int.from_bytes(block[i : i + 8], "big") / 2.0**64 for i in range(24, -1, -8)
            ]
        return self._pending.pop()


def _apportion(weights: list[float], total: int) -> list[int]:
    """Split ``total`` hundredths in proportion to ``weights`` (largest remainder).

    Rounding each share on its own drifts by up to n/200, and fixing only the largest share
    can then push it below zero when there are many options; largest remainder is exact.
    """
    mass = sum(weights)
    exact = [w * total / mass for w in weights]
    shares = [math.floor(x) for x in exact]
    short = total - sum(shares)
    by_remainder = sorted(range(len(weights)), key=lambda i: (shares[i] - exact[i], i))
    for i in by_remainder[:short]:
        shares[i] += 1
    return shares


def _seed(model: str, question: Mapping[str, Any], state_bytes: bytes) -> bytes:
    return hashlib.sha256(
        model.encode("utf-8") + b"\x00" + canonical_bytes(question) + b"\x00" + state_bytes
    ).digest()


def _confidence(top_hundredths: int, draws: _Draws) -> float:
    # Reported confidence tracks the top probability but is not a function of it alone,
    # so that a consumer cannot pass by deriving it instead of reading it.
    return round(math.sqrt(top_hundredths / _HUNDRED) * (0.85 + 0.15 * draws.next()), 2)


def _noul(draws: _Draws) -> dict[str, Any]:
    return {"type": "noul", "noul": min(_HUNDRED, int(draws.next() * (_HUNDRED + 1))) / _HUNDRED}


def _choice(criteria: Mapping[str, Any], draws: _Draws) -> dict[str, Any]:
    # Draws go to options in sorted order: a JSON object's key order is not part of it (and
    # canonical bytes sort it), so the answer must not change with it.
    ranked = sorted(criteria)
    shares = dict(zip(ranked, _apportion([draws.next() ** 3 + 1e-9 for _ in ranked], _HUNDRED),
                      strict=True))
    best = max(ranked, key=lambda opt: shares[opt])  # ties: the first in sorted order
    return {
        "type": "choice",
        "choice": best,
        "probabilities": {opt: shares[opt] / _HUNDRED for opt in criteria},
        "confidence": _confidence(shares[best], draws),
    }


def _score(levels: list[Any], draws: _Draws) -> dict[str, Any]:
    n = len(levels)
    centre = draws.next() * (n - 1)
    spread = 0.35 + 0.9 * draws.next()
    weights = [math.exp(-(((i - centre) / spread) ** 2) / 2) + 1e-9 for i in range(n)]
    shares = _apportion(weights, _HUNDRED)
    return {
        "type": "score",
        # In hundredths the weighted index is an exact integer: no second rounding.
        "score": sum(i * s for i, s in enumerate(shares)) / _HUNDRED,
        "legend": {str(i): label for i, label in enumerate(levels)},
        "probabilities": {str(i): s / _HUNDRED for i, s in enumerate(shares)},
        "confidence": _confidence(max(shares), draws),
    }


def answer_question(
    model: str, question: Mapping[str, Any], state: Any, *, state_bytes: bytes | None = None
) -> dict[str, Any]:
    """The System One answer to one (already validated) question about ``state``.

    ``state_bytes`` is ``canonical_bytes(state)`` when the caller has it (one state, many
    questions); it must be exactly that, or answers stop being stable.
    """
    if state_bytes is None:
        state_bytes = canonical_bytes(state)
    draws = _Draws(_seed(model, question, state_bytes))
    kind = question["type"]
    if kind == "noul":
        return _noul(draws)
    if kind == "choice":
        return _choice(question["criteria"], draws)
    if kind == "score":
        return _score(list(question["criteria"]), draws)
    raise ValueError(f"unknown question type {kind!r}")


def spoil_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The same answer made invalid: probabilities summing to 0.7, or a noul above 1."""
    spoiled = dict(answer)
    if answer["type"] == "noul":
        spoiled["noul"] = BAD_NOUL
        return spoiled
    probabilities: Mapping[str, float] = answer["probabilities"]
    keys = list(probabilities)
    shares = _apportion(
        [probabilities[k] + 1e-9 for k in keys], round(BAD_PROBABILITY_MASS * _HUNDRED)
    )
    spoiled["probabilities"] = {k: s / _HUNDRED for k, s in zip(keys, shares, strict=True)}
    if answer["type"] == "score":
        spoiled["score"] = sum(int(k) * s for k, s in zip(keys, shares, strict=True)) / _HUNDRED
    return spoiled
