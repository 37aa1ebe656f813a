"""Answer decoding: refusals never become values, anything that does not fit is refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.decoding import score_tolerance
from shared.errors import DecisionProviderError
from worker.providers import decode_answers, derived_confidence

NOUL = {"type": "noul", "instructions": "?"}
CHOICE = {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None, "c": None}}
SCORE = {"type": "score", "instructions": "?", "criteria": ["low", "mid", "high"]}


def _decode(question: dict[str, Any], answer: Any) -> Any:
    return decode_answers(
        {"q": question}, {"q": answer} if answer is not None else {}, provider="t",
        missing="refused",
    )["q"]


def _invalid(question: dict[str, Any], answer: Any) -> str:
    with pytest.raises(DecisionProviderError) as info:
        _decode(question, answer)
    assert info.value.code == "invalid_response"
    return str(info.value)


@pytest.mark.parametrize("question", [NOUL, CHOICE, SCORE])
@pytest.mark.parametrize("answer", [None, {"type": "refusal"}])
def test_missing_or_refusal_is_refused_without_value(question: dict[str, Any], answer: Any) -> None:
    decoded = _decode(question, answer)
    assert decoded.refused and decoded.type == question["type"]
    assert decoded.value is None and decoded.probability is None and decoded.confidence is None
    assert decoded.confidence_source is None


@pytest.mark.parametrize(
    ("p", "value", "confidence"),
    [(0.95, True, 0.9), (0.5, True, 0.0), (0.49, False, 0.02), (0.0, False, 1.0)],
)
def test_noul(p: float, value: bool, confidence: float) -> None:
    decoded = _decode(NOUL, {"type": "noul", "noul": p})
    assert (decoded.value, decoded.probability) == (value, p)
    assert decoded.confidence == pytest.approx(confidence)
    assert decoded.confidence_source == "derived"


@pytest.mark.parametrize(
    "answer",
    [
        {"type": "noul", "noul": "0.9"},
        {"type": "noul", "noul": True},
        {"type": "noul", "noul": 1.2},
        {"type": "noul", "noul": -0.1},
        {"type": "noul"},
        {"type": "choice", "choice": "a"},
        "yes",
        {"type": "noul", "noul": 0.5, "confidence": "high"},
    ],
)
def test_noul_mistyped(answer: Any) -> None:
    _invalid(NOUL, answer)


def test_choice_reported_and_derived_confidence() -> None:
    probs = {"a": 0.6, "b": 0.3, "c": 0.1}
    reported = _decode(
        CHOICE, {"type": "choice", "choice": "a", "probabilities": probs, "confidence": 0.77}
    )
    assert (reported.confidence, reported.confidence_source) == (0.77, "reported")
    derived = _decode(CHOICE, {"type": "choice", "choice": "a", "probabilities": probs})
    assert derived.confidence == pytest.approx(0.3) and derived.confidence_source == "derived"
    assert derived.probability == 0.6 and derived.probabilities == probs


def test_choice_missing_options_count_as_zero() -> None:
    decoded = _decode(CHOICE, {"type": "choice", "choice": "b", "probabilities": {"b": 1.0}})
    assert decoded.probabilities == {"a": 0.0, "b": 1.0, "c": 0.0}
    assert decoded.confidence == 1.0


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"type": "choice", "choice": "z", "probabilities": {"a": 1.0}}, "not one of the options"),
        ({"type": "choice", "choice": "a", "probabilities": {"a": 0.5, "z": 0.5}}, "not offered"),
        ({"type": "choice", "choice": "a", "probabilities": {"a": 0.6, "b": 0.3}}, "sum to 1"),
        ({"type": "choice", "choice": "a", "probabilities": {"a": 0.7, "b": 0.4}}, "sum to 1"),
        (
            {"type": "choice", "choice": "c", "probabilities": {"a": 0.6, "b": 0.3, "c": 0.1}},
            "most probable",
        ),
        ({"type": "choice", "choice": "a"}, "probabilities"),
        ({"type": "choice", "choice": 1, "probabilities": {"a": 1.0}}, "string"),
    ],
)
def test_choice_invalid(answer: dict[str, Any], why: str) -> None:
    assert why in _invalid(CHOICE, answer)


def test_choice_tie_within_rounding_is_accepted() -> None:
    decoded = _decode(
        CHOICE, {"type": "choice", "choice": "b", "probabilities": {"a": 0.5, "b": 0.49, "c": 0.01}}
    )
    assert decoded.value == "b"


def test_score_label_probability_and_derived_confidence() -> None:
    decoded = _decode(
        SCORE, {"type": "score", "score": 1.05, "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}}
    )
    assert decoded.value == 1.05 and decoded.label == "mid" and decoded.probability == 0.95
    assert decoded.confidence == pytest.approx(0.9) and decoded.confidence_source == "derived"


@pytest.mark.parametrize(
    ("score", "label"), [(0.49, "low"), (0.5, "mid"), (1.5, "high"), (2.0, "high")]
)
def test_score_nearest_label_half_up(score: float, label: str) -> None:
    # Probabilities chosen so that sum(i * p_i) == score.
    p2 = score / 2
    decoded = _decode(
        SCORE, {"type": "score", "score": score, "probabilities": {"0": 1 - p2, "2": p2}}
    )
    assert decoded.label == label


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            {"type": "score", "score": 1.8, "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}},
            "inconsistent",
        ),
        ({"type": "score", "score": 3.0, "probabilities": {"2": 1.0}}, "outside"),
        ({"type": "score", "score": 1.0, "probabilities": {"1": 0.9, "3": 0.1}}, "not offered"),
        ({"type": "score", "score": "1", "probabilities": {"1": 1.0}}, "number"),
        (
            {"type": "score", "score": 1.0, "probabilities": {"1": 1.0}, "legend": {"7": "x"}},
            "legend",
        ),
    ],
)
def test_score_invalid(answer: dict[str, Any], why: str) -> None:
    assert why in _invalid(SCORE, answer)


def test_answers_for_questions_not_asked() -> None:
    with pytest.raises(DecisionProviderError) as info:
        decode_answers(
            {"q": NOUL}, {"q": {"type": "noul", "noul": 0.5}, "x": {}},
            provider="t", missing="refused",
        )
    assert "not asked" in str(info.value)


def test_answers_not_an_object() -> None:
    with pytest.raises(DecisionProviderError):
        decode_answers(
            {"q": NOUL}, [{"type": "noul", "noul": 0.5}], provider="t", missing="refused"
        )


def test_messages_never_echo_response_values() -> None:
    text = _invalid(
        CHOICE, {"type": "choice", "choice": "SECRET-OPTION", "probabilities": {"a": 1.0}}
    )
    assert "SECRET-OPTION" not in text
    text = _invalid(NOUL, {"type": "SECRET-TYPE", "noul": 0.5})
    assert "SECRET-TYPE" not in text


def test_derived_confidence_is_the_margin() -> None:
    assert derived_confidence({"a": 0.88, "b": 0.12, "c": 0.0}) == pytest.approx(0.76)
    assert derived_confidence({"a": 0.5, "b": 0.5}) == 0.0
    assert derived_confidence({"only": 0.9}) == pytest.approx(0.9)


@st.composite
def _hundredths(draw: st.DrawFn, n: int) -> list[int]:
    cuts = sorted(draw(st.lists(st.integers(0, 100), min_size=n - 1, max_size=n - 1)))
    edges = [0, *cuts, 100]
    return [edges[i + 1] - edges[i] for i in range(n)]


@given(st.integers(2, 10).flatmap(lambda n: _hundredths(n)), st.data())
def test_rounded_distributions_always_decode(shares: list[int], data: st.DataObject) -> None:
    n = len(shares)
    exact = [s / 100 for s in shares]
    # Each probability is reported rounded, drifting up to 0.005 either way (the sum may then
    # drift too, but stays within the tolerance for up to 4 levels).
    jitter = data.draw(st.lists(st.sampled_from([-0.005, 0.0, 0.005]), min_size=n, max_size=n))
    reported = [min(1.0, max(0.0, p + j)) for p, j in zip(exact, jitter, strict=True)]
    if abs(sum(reported) - 1) > 0.02:
        reported = exact
    score = round(sum(i * p for i, p in enumerate(exact)), 2)
    question = {"type": "score", "instructions": "?", "criteria": [f"l{i}" for i in range(n)]}
    answer = {
        "type": "score",
        "score": score,
        "probabilities": {str(i): p for i, p in enumerate(reported)},
    }
    decoded = _decode(question, answer)
    assert decoded.label == f"l{min(int(score + 0.5), n - 1)}"
    assert 0.0 <= (decoded.confidence or 0.0) <= 1.0


@given(st.floats(0, 1))
def test_noul_confidence_formula(p: float) -> None:
    decoded = _decode(NOUL, {"type": "noul", "noul": p})
    assert decoded.value is (p >= 0.5)
    assert decoded.confidence == pytest.approx(2 * abs(p - 0.5), abs=1e-6)


def test_score_tolerance_grows_with_levels() -> None:
    assert score_tolerance(2) < score_tolerance(10)
    assert score_tolerance(3) == pytest.approx(0.005 * 3 + 0.005, abs=1e-6)


@pytest.mark.parametrize("question", [NOUL, CHOICE, SCORE])
def test_missing_answer_where_refusals_are_explicit_is_invalid(question: dict[str, Any]) -> None:
    with pytest.raises(DecisionProviderError) as info:
        decode_answers(
            {"q": question, "r": NOUL}, {"r": {"type": "noul", "noul": 0.5}},
            provider="t", missing="invalid_response",
        )
    assert info.value.code == "invalid_response"
    assert "do not match the questions" in str(info.value) and "q" in str(info.value)


def test_explicit_refusal_where_refusals_are_explicit_is_refused() -> None:
    decoded = decode_answers(
        {"q": CHOICE}, {"q": {"type": "refusal"}}, provider="t", missing="invalid_response"
    )["q"]
    assert decoded.refused and decoded.value is None


@pytest.mark.parametrize(
    ("shares", "valid"),
    [
        # Hundredths as a host rounds them, summing to 0.98 and to 1.02: at the tolerance, so
        # valid (a float sum of 0.98 is 0.020000000000000018 from 1, and was refused).
        ([0.0, 0.005, 0.005, 0.285, 0.285, 0.005, 0.395], True),
        ([0.01, 0.01, 0.3, 0.3, 0.01, 0.39], True),  # 1.02
        ([0.0, 0.005, 0.005, 0.285, 0.285, 0.005, 0.394], False),  # 0.979
        ([0.01, 0.01, 0.3, 0.3, 0.01, 0.391], False),  # 1.021
    ],
)
def test_a_distribution_exactly_at_the_sum_tolerance_decodes(
    shares: list[float], valid: bool
) -> None:
    criteria = [f"l{i}" for i in range(len(shares))]
    question = {"type": "choice", "instructions": "?", "criteria": dict.fromkeys(criteria)}
    top = criteria[shares.index(max(shares))]
    probabilities = dict(zip(criteria, shares, strict=True))
    answer = {"type": "choice", "choice": top, "probabilities": probabilities}
    if valid:
        assert _decode(question, answer).value == top
    else:
        assert "do not sum to 1" in _invalid(question, answer)


def test_a_choice_exactly_at_the_argmax_tolerance_decodes() -> None:
    # 0.21 is 0.02 below 0.23, within the tolerance; 0.23 - 0.02 is 0.21000000000000002.
    question = {"type": "choice", "instructions": "?", "criteria": dict.fromkeys("abcde")}
    shares = {"a": 0.23, "b": 0.21, "c": 0.2, "d": 0.18, "e": 0.18}
    answer = {"type": "choice", "choice": "b", "probabilities": shares}
    assert _decode(question, answer).value == "b"
    shares = {"a": 0.23, "b": 0.2, "c": 0.21, "d": 0.18, "e": 0.18}
    assert "not the most probable" in _invalid(
        question, {"type": "choice", "choice": "b", "probabilities": shares}
    )
