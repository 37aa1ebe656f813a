"""The answer forms: built from the questions and menus, read back into what resolve checks."""

from __future__ import annotations

import pytest

from shared.errors import FieldProblem, ResolutionInvalid
from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.replies import Answer, EscalationMessage
from shared.resolutions import check_resolution, questions_problem
from shared.verdicts import escalation
from tests.console.support import (
    MENU_OPTIONS,
    menu_escalation,
    refused_escalation,
    sift_escalation,
)
from worker.console.decide_form import (
    MACHINE,
    PAGE_SIZE,
    decide_answer,
    decide_fields,
    paged,
    uses_bulk,
)
from worker.console.menu_form import RAW_FIELD, menu_answer, menu_choices


def test_fields_follow_the_question_types_and_ask_resolve_what_is_required() -> None:
    fields = decide_fields(refused_escalation("j1"))
    assert [(f.name, f.question_id, f.type) for f in fields] == [
        ("q0", "urgent", "noul"),
        ("q1", "team", "choice"),
        ("q2", "mood", "score"),
    ]
    # Only the refused question must be answered; the machine's usable answers may stand.
    assert [f.required for f in fields] == [False, True, False]
    assert [c.value for c in fields[0].choices] == ["true", "false"]
    assert [(c.value, c.description) for c in fields[1].choices] == [
        ("=billing", "Payments"),
        ("=sales", None),
    ]
    assert [c.label for c in fields[2].choices] == ["0: calm", "1: cross", "2: livid"]
    assert fields[1].machine is not None and fields[1].machine.refused


def test_an_interrupted_call_needs_every_question() -> None:
    fields = decide_fields(refused_escalation("j1", reason="decision_interrupted"))
    assert all(f.required for f in fields)


def test_the_form_reads_back_into_typed_values_and_leaves_kept_ones_out() -> None:
    message = refused_escalation("j1")
    fields = decide_fields(message)
    answer = decide_answer(fields, {"q0": "false", "q1": "sales", "q2": "2"})
    assert answer == {"urgent": False, "team": "sales", "mood": 2}
    assert decide_answer(fields, {"q0": "", "q1": "billing"}) == {"team": "billing"}
    assert check_resolution(message, decide_answer(fields, {"q1": "billing"})) == {
        "urgent": True,
        "team": "billing",
        "mood": 1.2,
    }


@pytest.mark.parametrize("named", ["machine", "=machine", "true"])
@pytest.mark.parametrize("reason", ["decision_refused", "decision_interrupted"])
def test_an_option_reads_back_as_itself_whatever_it_is_named(named: str, reason: str) -> None:
    # Found by an attack: an option named "machine" sent the form's own marker, so picking
    # it published the machine's answer (or, when an answer was required, none).
    criteria = {named: None, "human": None}
    questions = {"who": {"type": "choice", "instructions": "Who?", "criteria": criteria}}
    job = parse_job({"id": "o1", "reply_to": "r", "state": "s", "questions": questions})
    answers = {"who": Answer(type="choice", value="human", confidence=0.5)}
    message = escalation(job, reason, "test", [], answers)  # type: ignore[arg-type]
    [field] = decide_fields(message)
    [offered] = [c for c in field.choices if c.label == named]
    answer = decide_answer([field], {field.name: offered.value})
    assert answer == {"who": named}
    assert check_resolution(message, answer) == {"who": named}


def test_a_tampered_value_goes_through_to_resolve_which_refuses_it() -> None:
    message = refused_escalation("j1")
    fields = decide_fields(message)
    answer = decide_answer(fields, {"q0": "maybe", "q1": "marketing", "q2": "9"})
    assert answer == {"urgent": "maybe", "team": "marketing", "mood": 9}
    with pytest.raises(ResolutionInvalid) as refused:
        check_resolution(message, answer)
    assert sorted(p.field for p in refused.value.problems) == [
        "answer.mood",
        "answer.team",
        "answer.urgent",
    ]


def test_menu_options_become_a_radio_each_and_payload_inputs() -> None:
    choices = menu_choices(menu_escalation("m1"))
    assert choices is not None
    assert [(c.name, c.kind) for c in choices] == [("done", "value"), ("plan", "schema")]
    assert choices[0].value_json == '"CONVERSATION_OVER"'
    plan = choices[1]
    assert [(i.field, i.widget) for i in plan.inputs] == [
        ("title", "text"),
        ("priority", "select"),
        ("steps", "number"),
    ]
    assert plan.inputs[1].options == (('"low"', "low"), ('"high"', "high"))


def test_the_menu_form_reads_back_into_a_pick() -> None:
    choices = menu_choices(menu_escalation("m1"))
    form = {"call": "plan", "m1.f0": "Ship it", "m1.f1": '"high"', "m1.f2": "3"}
    assert menu_answer(choices, form) == (
        {"call": "plan", "args": {"title": "Ship it", "priority": "high", "steps": 3}},
        [],
    )
    assert menu_answer(choices, {"call": "done", "m1.f0": "ignored"}) == ({"call": "done"}, [])
    # A number that is not an int is passed on for the menu engine to refuse, not coerced.
    pick, problems = menu_answer(choices, {**form, "m1.f2": "2.5"})
    assert pick["args"]["steps"] == 2.5 and problems == []
    # An option the menu does not have is passed on too: the engine names the problem.
    assert menu_answer(choices, {"call": "explode"}) == ({"call": "explode"}, [])
    assert menu_answer(choices, {}) == (None, [FieldProblem("call", "pick an option")])


def test_a_raw_pick_overrides_the_fields_and_must_be_json() -> None:
    choices = menu_choices(menu_escalation("m1"))
    assert menu_answer(choices, {"call": "done", RAW_FIELD: '{"call": "plan"}'}) == (
        {"call": "plan"},
        [],
    )
    not_json = FieldProblem(RAW_FIELD, "not JSON")
    assert menu_answer(choices, {RAW_FIELD: "{nope"}) == (None, [not_json])


def test_handler_options_use_the_parameters_the_escalation_carries() -> None:
    message = menu_escalation("m1")
    message.context["options"] = [
        *MENU_OPTIONS,
        {"kind": "handler", "name": "refund", "handler": "issue_refund"},
        {"kind": "handler", "name": "custom", "handler": "anything"},
    ]
    message.context["handler_params"] = {
        "refund": {
            "handler": "issue_refund",
            "accepts_extra": False,
            "params": [
                {"name": "amount", "required": True, "type": {"type": "float"}},
                {"name": "note", "required": False, "type": {"type": "str"}, "default": ""},
            ],
        }
    }
    choices = menu_choices(message)
    assert choices is not None
    refund, custom = choices[2], choices[3]
    assert [(i.field, i.widget, i.required) for i in refund.inputs] == [
        ("amount", "number", True),
        ("note", "text", False),
    ]
    assert refund.inputs[1].default_json == '""'
    # The optional parameter left empty is left out, so the handler's default applies.
    assert menu_answer(choices, {"call": "refund", "m2.f0": "12.5", "m2.f1": ""}) == (
        {"call": "refund", "args": {"amount": 12.5}},
        [],
    )
    # Without described parameters: one JSON box for the arguments.
    assert custom.inputs == () and custom.args_name == "m3.args"
    assert menu_answer(choices, {"call": "custom", "m3.args": '{"x": [1]}'}) == (
        {"call": "custom", "args": {"x": [1]}},
        [],
    )


def test_an_escalation_without_a_usable_encoding_falls_back_to_raw_json() -> None:
    message = menu_escalation("m1")
    message.context["options"] = [{"kind": "schema", "name": "bad", "schema": {"type": "list"}}]
    assert menu_choices(message) is None
    del message.context["options"]
    assert menu_choices(message) is None
    assert menu_answer(None, {RAW_FIELD: '{"call": "done"}'}) == ({"call": "done"}, [])


def test_a_bulk_answer_fills_what_the_page_leaves_and_the_page_overrides_it() -> None:
    message = sift_escalation("s1", 6, decided=3)  # 0 yes, 1 no, 2 yes; 3-5 refused
    fields = decide_fields(message)
    assert uses_bulk(message, fields)
    assert [f.required for f in fields] == [False] * 3 + [True] * 3
    assert [f.item_text for f in fields][:1] == ["ticket 0: <b>refund</b> please"]

    def resolved(form: dict[str, str]) -> list[bool]:
        answer = check_resolution(message, decide_answer(fields, form))
        return [answer[f"item.{i}"] for i in range(6)]

    assert resolved({"bulk": "keep-false"}) == [True, False, True, False, False, False]
    assert resolved({"bulk": "keep-true", "q0": "false"}) == [False, False, True, True, True, True]
    assert resolved({"bulk": "false", "q4": "true"}) == [False] * 4 + [True, False]
    assert resolved({"bulk": "true", "q1": MACHINE}) == [True, False, True, True, True, True]
    with pytest.raises(ResolutionInvalid) as refused:
        check_resolution(message, decide_answer(fields, {"bulk": "keep"}))
    assert [p.field for p in refused.value.problems] == [
        "answer.item.3",
        "answer.item.4",
        "answer.item.5",
    ]


def test_an_interrupted_sift_keeps_the_machines_answers_by_sending_them() -> None:
    message = sift_escalation("s1", 4, decided=2).model_copy(
        update={"reason": "decision_interrupted"}
    )
    fields = decide_fields(message)
    assert all(f.required for f in fields)
    answer = decide_answer(fields, {"bulk": "keep-false"})
    assert answer == {"item.0": True, "item.1": False, "item.2": False, "item.3": False}


def test_pages_split_the_questions_and_clamp_the_page_asked() -> None:
    fields = decide_fields(sift_escalation("s1", 2 * PAGE_SIZE + 5))
    assert [
        (p.page, p.pages, len(p.shown)) for p in map(lambda n: paged(fields, n), (0, 2, 9))
    ] == [
        (1, 3, PAGE_SIZE),
        (2, 3, PAGE_SIZE),
        (3, 3, 5),
    ]
    small = decide_fields(refused_escalation("j1"))
    assert not uses_bulk(refused_escalation("j1"), small)


def test_a_decide_with_many_questions_is_paged_and_takes_a_bulk_answer() -> None:
    # More questions than a page: a job over the 100-question input limit (shared.limits)
    # is never queued, but an escalation stored by an older worker may carry one.
    questions = {f"q{i}": {"type": "noul", "instructions": f"Is {i} odd?"} for i in range(150)}
    questions["team"] = {"type": "choice", "instructions": "Team?", "criteria": {"a": None}}
    job = DecideJob.model_validate(
        {"id": "many", "reply_to": "r", "state": "s", "questions": questions}
    )
    message = escalation(job, "decision_interrupted", "lost", [], None)
    fields = decide_fields(message)
    assert uses_bulk(message, fields) and paged(fields, 2).shown[-1].question_id == "team"
    answer = decide_answer(fields, {"bulk": "false", "q150": "a", "q3": "true"})
    resolved = check_resolution(message, answer)
    assert resolved["team"] == "a" and resolved["q3"] is True
    assert sum(1 for v in resolved.values() if v is True) == 1
    # A choice question is never filled by a yes/no bulk answer: it needs its own.
    with pytest.raises(ResolutionInvalid) as refused:
        check_resolution(message, decide_answer(fields, {"bulk": "false"}))
    assert [p.field for p in refused.value.problems] == ["answer.team"]


def test_text_that_cannot_be_read_is_named_beside_its_field_never_raised() -> None:
    message = menu_escalation("m1")
    message.context["options"] = [
        *MENU_OPTIONS,
        {
            "kind": "schema",
            "name": "tagged",
            "schema": {"type": "object", "fields": [{"name": "tags", "type": "any"}]},
        },
        {"kind": "handler", "name": "custom", "handler": "anything"},
    ]
    choices = menu_choices(message)
    deep = "[" * 50_000 + "]" * 50_000
    too_deep = "not JSON: nested too deep to read"
    plan = {"call": "plan", "m1.f0": "t", "m1.f1": '"low"', "m1.f2": "1" * 5000}
    digits = FieldProblem("m1.f2", "not a number: too many digits")
    assert menu_answer(choices, plan) == (None, [digits])
    assert menu_answer(choices, {RAW_FIELD: deep}) == (None, [FieldProblem(RAW_FIELD, too_deep)])
    assert menu_answer(choices, {"call": "tagged", "m2.f0": deep}) == (
        None,
        [FieldProblem("m2.f0", too_deep)],
    )
    assert menu_answer(choices, {"call": "custom", "m3.args": deep}) == (
        None,
        [FieldProblem("m3.args", too_deep)],
    )
    # A select's value that is not JSON goes on as text, for the engine to refuse.
    pick, problems = menu_answer(choices, {**plan, "m1.f1": deep, "m1.f2": "2"})
    assert pick["args"]["priority"] == deep and problems == []


def test_questions_of_another_shape_are_not_readable() -> None:
    # What makes the pages list an entry as unreadable, and the form not built of it.
    good = refused_escalation("j1")
    assert questions_problem(good) is None

    def shaped(questions: object) -> EscalationMessage:
        return good.model_copy(update={"context": {**good.context, "questions": questions}})

    unreadable = (
        ["x"], {"a": "x"}, None, {"a": {"type": "noul", "escalate_below": "x"}},
        {"a": {"type": "?"}},  # no answer of an unknown type could be checked either
    )
    for questions in unreadable:
        assert questions_problem(shaped(questions)) is not None, questions
    assert questions_problem(shaped({})) is None
