"""Made-up answers: stable, sensitive to their inputs, and well-formed per the wire facts."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.testing.faux import (
    BAD_NOUL,
    answer_question,
    openai_question_to_system_one,
    spoil_answer,
    system_one_answers,
)

from .conftest import system_one_body

text = st.text(min_size=1, max_size=20).filter(lambda s: s.strip() != "")
states = st.one_of(
    st.text(max_size=50),
    st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4),
    st.lists(st.integers() | st.text(max_size=8), max_size=4),
)
noul_questions = st.fixed_dictionaries({"type": st.just("noul"), "instructions": text})
choice_questions = st.fixed_dictionaries(
    {
        "type": st.just("choice"),
        "instructions": text,
        "criteria": st.dictionaries(text, st.none() | text, min_size=1, max_size=255),
    }
)
score_questions = st.fixed_dictionaries(
    {
        "type": st.just("score"),
        "instructions": text,
        "criteria": st.lists(text, min_size=2, max_size=10),
    }
)
questions = st.one_of(noul_questions, choice_questions, score_questions)


def hundredths(x: float) -> bool:
    return abs(x * 100 - round(x * 100)) < 1e-9


def check_well_formed(question: dict[str, Any], answer: dict[str, Any]) -> None:
    assert answer["type"] == question["type"]
    if question["type"] == "noul":
        assert set(answer) == {"type", "noul"}
        assert 0.0 <= answer["noul"] <= 1.0 and hundredths(answer["noul"])
        return
    probabilities = answer["probabilities"]
    assert all(0.0 <= p <= 1.0 and hundredths(p) for p in probabilities.values())
    assert abs(sum(probabilities.values()) - 1.0) < 1e-9  # exactly 1.00, not merely within 0.02
    assert 0.0 <= answer["confidence"] <= 1.0 and hundredths(answer["confidence"])
    if question["type"] == "choice":
        assert list(probabilities) == list(question["criteria"])
        assert answer["choice"] in question["criteria"]
        assert probabilities[answer["choice"]] == max(probabilities.values())
    else:
        levels = question["criteria"]
        assert list(answer["legend"]) == [str(i) for i in range(len(levels))]
        assert list(answer["legend"].values()) == levels
        assert list(probabilities) == [str(i) for i in range(len(levels))]
        weighted = sum(int(i) * p for i, p in probabilities.items())
        assert abs(answer["score"] - weighted) <= 0.01
        assert 0.0 <= answer["score"] <= len(levels) - 1


@settings(max_examples=300, deadline=None)
@given(model=text, question=questions, state=states)
def test_every_answer_is_well_formed(model: str, question: dict[str, Any], state: Any) -> None:
    check_well_formed(question, answer_question(model, question, state))


@settings(max_examples=100, deadline=None)
@given(question=questions, state=states)
def test_the_same_input_gives_the_same_bytes(question: dict[str, Any], state: Any) -> None:
    first = json.dumps(answer_question("faux-1", question, state))
    # Key order is not part of the input (canonical bytes sort it), down to the options.
    reordered = dict(reversed(list(question.items())))
    if question["type"] == "choice":
        reordered["criteria"] = dict(reversed(list(question["criteria"].items())))
    again = answer_question("faux-1", reordered, state)
    assert json.dumps(again, sort_keys=True) == json.dumps(json.loads(first), sort_keys=True)
    assert json.dumps(answer_question("faux-1", question, state)) == first


def test_answers_depend_on_state_model_and_question() -> None:
    question = system_one_body()["questions"]["department"]
    base = answer_question("faux-1", question, "state 0")
    by_state = {json.dumps(answer_question("faux-1", question, f"state {i}")) for i in range(20)}
    by_model = {json.dumps(answer_question(f"model-{i}", question, "state 0")) for i in range(20)}
    reworded = {**question, "instructions": "Which team, really?"}
    assert len(by_state) > 10 and len(by_model) > 10
    assert answer_question("faux-1", reworded, "state 0") != base


def test_choices_are_not_always_the_first_option() -> None:
    criteria = {"a": None, "b": None, "c": None}
    question = {"type": "choice", "instructions": "x", "criteria": criteria}
    picked = {answer_question("faux-1", question, f"s{i}")["choice"] for i in range(60)}
    assert picked == {"a", "b", "c"}


def test_state_bytes_shortcut_gives_the_same_answers() -> None:
    body = system_one_body(state={"b": 1, "a": [1, 2]})
    many = system_one_answers("m", body["questions"], body["state"])
    for qid, question in body["questions"].items():
        assert many[qid] == answer_question("m", question, {"a": [1, 2], "b": 1})


def test_refused_ids_are_missing_from_system_one_answers() -> None:
    body = system_one_body()
    answers = system_one_answers("m", body["questions"], body["state"], refused={"department"})
    assert set(answers) == {"is_urgent", "frustration"}


@settings(max_examples=150, deadline=None)
@given(question=st.one_of(choice_questions, score_questions), state=states)
def test_spoiled_probabilities_sum_to_point_seven(question: dict[str, Any], state: Any) -> None:
    spoiled = spoil_answer(answer_question("faux-1", question, state))
    assert abs(sum(spoiled["probabilities"].values()) - 0.7) < 1e-9
    assert abs(sum(spoiled["probabilities"].values()) - 1.0) > 0.02  # a client must reject it
    if question["type"] == "score":
        weighted = sum(int(i) * p for i, p in spoiled["probabilities"].items())
        assert abs(spoiled["score"] - weighted) < 1e-9


def test_spoiled_noul_is_out_of_range() -> None:
    answer = answer_question("faux-1", {"type": "noul", "instructions": "x"}, "s")
    assert spoil_answer(answer) == {"type": "noul", "noul": BAD_NOUL} and BAD_NOUL > 1


def test_an_openai_question_is_answered_as_its_system_one_form() -> None:
    question = {
        "type": "choice",
        "instructions": "pick",
        "choices": [{"value": True, "description": "yes"}, {"value": "maybe"}],
    }
    assert openai_question_to_system_one(question) == {
        "type": "choice",
        "instructions": "pick",
        "criteria": {"true": "yes", "maybe": None},
    }
    score = {"type": "score", "instructions": "s", "levels": [{"label": "lo"}, {"label": "hi"}]}
    assert openai_question_to_system_one(score)["criteria"] == ["lo", "hi"]
    predicate = {"type": "predicate", "name": "p", "instructions": "y?"}
    assert openai_question_to_system_one(predicate) == {"type": "noul", "instructions": "y?"}
