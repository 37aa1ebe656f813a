"""The decide job contract: what validates, what is rejected, and the field it names."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import json_measure, strict_json
from shared.errors import FieldProblem, JobInvalid
from shared.fingerprint import job_fingerprint
from shared.job_parsing import job_deadline, parse_job
from shared.limits import (
    MAX_MENU_OPTIONS,
    MAX_QUESTIONS,
    MAX_SCHEMA_FIELDS,
    MAX_SIFT_ITEMS,
    Limits,
    job_problems,
    refused_job,
)
from shared.rejection import MAX_PROBLEMS, rejection_for
from shared.settings import Settings


def job(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j1",
        "kind": "decide",
        "reply_to": "r1",
        "state": {"body": "Help, payouts fail"},
        "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?", "escalate_below": 0.4},
            "team": {
                "type": "choice",
                "instructions": "Team?",
                "criteria": {"billing": "Money", "sales": None},
            },
            "mood": {"type": "score", "instructions": "Mood?", "criteria": ["calm", "angry"]},
        },
    }
    base.update(over)
    return base


def fields_of(raw: Any) -> list[str]:
    with pytest.raises(JobInvalid) as info:
        parse_job(raw)
    return [p.field for p in info.value.problems]


def test_a_valid_job_parses_and_its_wire_questions_drop_routing_fields() -> None:
    parsed = parse_job(job())
    assert parsed.questions["urgent"].wire() == {"type": "noul", "instructions": "Urgent?"}
    assert parsed.questions["team"].wire()["criteria"] == {"billing": "Money", "sales": None}


@pytest.mark.parametrize("state", [3, 2.5, True, None])
def test_state_must_be_string_object_or_array(state: Any) -> None:
    assert fields_of(job(state=state)) == ["state"]


@pytest.mark.parametrize("state", ["text", {"a": 1}, [1, 2]])
def test_state_may_be_string_object_or_array(state: Any) -> None:
    assert parse_job(job(state=state)).state == state


def test_choice_takes_at_most_255_options() -> None:
    ok = {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(255)}}
    parse_job(job(questions={"q": ok}))
    too_many = {**ok, "criteria": {f"o{i}": None for i in range(256)}}
    assert fields_of(job(questions={"q": too_many})) == ["questions.q.criteria"]


@pytest.mark.parametrize("levels, valid", [(1, False), (2, True), (10, True), (11, False)])
def test_score_takes_2_to_10_levels(levels: int, valid: bool) -> None:
    raw = job(
        questions={
            "s": {
                "type": "score",
                "instructions": "x",
                "criteria": [f"l{i}" for i in range(levels)],
            }
        }
    )
    if valid:
        assert len(parse_job(raw).questions["s"].criteria) == levels  # type: ignore[union-attr]
    else:
        assert fields_of(raw) == ["questions.s.criteria"]


def test_questions_must_not_be_empty() -> None:
    assert fields_of(job(questions={})) == ["questions"]


def test_every_bad_field_is_named_at_once() -> None:
    raw = job(id="", reply_to="bad stream name", timeout_s=-1, extra=1)
    assert sorted(fields_of(raw)) == ["extra", "id", "reply_to", "timeout_s"]


def test_unknown_question_type_names_the_question() -> None:
    assert fields_of(job(questions={"q": {"type": "sentiment", "instructions": "x"}})) == [
        "questions.q"
    ]


def test_escalate_below_is_a_probability() -> None:
    raw = job(questions={"q": {"type": "noul", "instructions": "x", "escalate_below": 1.5}})
    assert fields_of(raw) == ["questions.q.escalate_below"]


def test_deadline_and_timeout_are_exclusive() -> None:
    raw = job(timeout_s=5, deadline=(datetime.now(UTC) + timedelta(seconds=60)).isoformat())
    assert fields_of(raw) == ["timeout_s"]


def test_non_json_and_non_object_bodies_are_rejected() -> None:
    assert fields_of(b"{not json") == ["(body)"]
    assert fields_of([1, 2]) == ["(job)"]
    assert fields_of(job(kind="launch")) == ["kind"]


def test_deadline_defaults_and_is_cut_to_the_ceiling() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    parsed = parse_job(job(submitted_at=start.isoformat()))
    assert job_deadline(parsed, default_s=120, ceiling_s=900) == start + timedelta(seconds=120)
    far = parse_job(job(submitted_at=start.isoformat(), timeout_s=5000))
    assert job_deadline(far, default_s=120, ceiling_s=900) == start + timedelta(seconds=900)


def test_fingerprint_ignores_transport_fields_but_not_content() -> None:
    a = parse_job(job(timeout_s=5))
    b = parse_job(
        job(timeout_s=50, reply_to="elsewhere", submitted_at=datetime.now(UTC).isoformat())
    )
    c = parse_job(job(state="another state"))
    assert job_fingerprint(a) == job_fingerprint(b)
    assert job_fingerprint(a) != job_fingerprint(c)


# --- input limits and strict JSON (shared.limits, shared.strict_json) ---------------------


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def problems_of(raw: Any, limits: Limits | None = None) -> list[FieldProblem]:
    with pytest.raises(JobInvalid) as info:
        parse_job(raw, limits)
    return info.value.problems


@pytest.mark.parametrize("depth", [300, 600, 5_000, 100_000])
def test_a_state_nested_deeper_than_the_limit_is_rejected_naming_it_never_a_recursion_error(
    depth: int,
) -> None:
    [problem] = problems_of(job(state=nested(depth)))
    assert problem.field.startswith("state.a") and "DECISIONS_MAX_JOB_DEPTH" in problem.message


def test_the_depth_limit_counts_from_the_job_and_is_a_setting() -> None:
    limits = Limits()
    parse_job(job(state=nested(limits.depth - 1)))  # the job object is the first level
    assert problems_of(job(state=nested(limits.depth)))[0].field.startswith("state")
    assert Limits.from_settings(Settings(max_job_depth=20)).depth == 20
    assert problems_of(job(state=nested(25)), Limits(depth=20))[0].field.startswith("state")


def test_a_5000_deep_line_of_text_is_rejected_by_its_id_naming_the_field() -> None:
    text = '{"id": "deep", "state": ' + "[" * 5_000 + "]" * 5_000 + "}"
    with pytest.raises(JobInvalid) as info:
        parse_job(text)
    [problem] = info.value.problems
    assert info.value.job_id == "deep" and problem.field.startswith("state[0]")


def test_text_too_deep_for_the_parser_still_reads_around_the_deep_value() -> None:
    deep = '{"x": ' * 3_000 + "1" + "}" * 3_000
    body = f'[{{"id": "a"}}, {{"id": "b", "s": {deep}}}, {{"id": "c", "s": "[[ \\" {{"}}]'
    value = strict_json.loads(body)
    assert [job["id"] for job in value] == ["a", "b", "c"] and value[2]["s"] == '[[ " {'
    found = json_measure.measure(value, max_depth=10_000)
    assert found.problem == ("[1].s.x.x.x.x.x....", "nested too deep to read")


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("metadata", {"blob": "x" * 60_000, "more": "y" * 10_000}, "DECISIONS_MAX_METADATA_BYTES"),
        ("metadata", {"k": "x" * 70_000}, "DECISIONS_MAX_STRING_BYTES"),
        ("state", "x" * 1_001, "DECISIONS_MAX_STATE_BYTES"),
    ],
)
def test_sizes_are_bounded_per_field_naming_the_setting(field: str, value: Any, limit: str) -> None:
    limits = Limits(state_bytes=1_000)
    [problem] = problems_of(job(**{field: value}), limits)
    assert problem.field.startswith(field) and limit in problem.message


def test_counts_of_questions_options_items_and_schema_fields_are_bounded() -> None:
    many = {f"q{i}": {"type": "noul", "instructions": "?"} for i in range(MAX_QUESTIONS + 1)}
    assert [p.field for p in problems_of(job(questions=many))] == ["questions"]
    sift = {
        "id": "s",
        "kind": "sift",
        "reply_to": "r",
        "items": ["x"] * (MAX_SIFT_ITEMS + 1),
        "question": {"type": "noul", "instructions": "?"},
    }
    assert [p.field for p in problems_of(sift)] == ["items"]
    fields = [{"name": f"f{i}", "type": "str"} for i in range(50_000)]
    menu = {
        "id": "m",
        "kind": "menu",
        "reply_to": "r",
        "prompt": "Pick",
        "options": [
            {"name": "big", "kind": "schema", "schema": {"type": "object", "fields": fields}}
        ],
    }
    [problem] = problems_of(menu, Limits(options_bytes=10 * 2**20))
    assert (
        problem.field == "options[0].schema" and f"at most {MAX_SCHEMA_FIELDS}" in problem.message
    )
    options = [{"name": f"o{i}", "kind": "value", "value": i} for i in range(MAX_MENU_OPTIONS + 1)]
    assert [p.field for p in problems_of({**menu, "options": options})] == ["options"]


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ('{"id": "j", "state": NaN}', "state", "NaN"),
        ('{"id": "j", "state": {"x": [Infinity]}}', "state.x[0]", "Infinity"),
        ('{"id": "j", "state": {"x": -Infinity}}', "state.x", "Infinity"),
        ('{"id": "j", "state": {"x": 1e400}}', "state.x", "Infinity"),
        ('{"id": "j", "state": {"a": 1, "a": 2}}', "state", "names a key twice ('a')"),
        ('{"id": "j", "id": "k", "state": "s"}', "(job)", "names a field twice ('id')"),
        ('{"id": "j", "state": "\\ud800"}', "state", "lone surrogate"),
        ('{"id": "j", "state": {"\\udfff": 1}}', "state", "lone surrogate"),
        ("\ufeff{}", "(body)", "byte order mark"),
        ('{"id": "j", "state": "é"}'.encode("utf-16"), "(body)", "not UTF-8"),
        (b'{"id": "j", "state": "caf\xe9"}', "(body)", "not UTF-8: byte 0xe9 at offset 25"),
        ('{"id": "j", "state": ', "(body)", "not JSON"),
        ('{"id": "j", "state": ' + "9" * 5000 + "}", "(body)", "not JSON"),
    ],
)
def test_text_that_is_not_strict_json_is_rejected_naming_the_reason(
    text: str | bytes, field: str, says: str
) -> None:
    problems = problems_of(text)
    assert problems[0].field == field and says in problems[0].message, problems


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"x": math.nan}, "metadata.x"),
        ({"x": [1, math.inf]}, "metadata.x[1]"),
        ({1: "int key"}, "metadata"),
        ({"s": {1, 2}}, "metadata.s"),
        ({"big": 10**200}, "metadata.big"),
        ({"surrogate": "\udc00"}, "metadata.surrogate"),
    ],
)
def test_python_values_that_are_not_strict_json_are_refused_never_rewritten(
    metadata: dict[Any, Any], field: str
) -> None:
    assert [p.field for p in problems_of(job(metadata=metadata))] == [field]


def test_the_parallel_state_limit_is_checked_with_the_others() -> None:
    state = {"body": "x" * 100_000}
    [problem] = problems_of(job(provider="parallel", state=state))
    assert problem.field == "state" and "parallel takes at most 96000" in problem.message
    assert parse_job(job(provider="faux", state=state)).state == state


def test_a_refused_job_keeps_its_id_and_reply_stream_and_says_why() -> None:
    raw = job(state=nested(600), metadata={"m": 1})
    problems = job_problems(raw, Limits())
    stub = refused_job(raw, problems)
    assert len(json.dumps(stub)) < 1_000
    with pytest.raises(JobInvalid) as info:
        parse_job(stub)
    assert info.value.job_id == "j1" and info.value.problems == problems
    rejection = rejection_for(stub, info.value.problems)
    assert (rejection.stream, rejection.job_id) == ("r1", "j1")
    assert rejection.message.metadata == {"m": 1}


def test_a_lone_surrogate_in_an_id_or_batch_is_rejected_and_never_encoded() -> None:
    """A lone surrogate (valid JSON text, no UTF-8) in the id or batch: its rejection's
    digest raised UnicodeEncodeError, in the producer and in the worker's guard (its refused
    stub keeps the id), found by an attack. The rejection is named by its digest, carries no
    batch, and every part of it that goes to Redis is UTF-8."""
    raw = job(id="a\ud800b", batch="b\udc80")
    problems = job_problems(raw, Limits())
    assert {p.field for p in problems} == {"id", "batch"}
    for body in (raw, refused_job(raw, problems)):
        rejection = rejection_for(body, problems)
        assert rejection.job_id.startswith("invalid-") and rejection.message.batch is None
        assert rejection.stream == "r1"
        for part in (rejection.job_id, rejection.marker, rejection.message.to_json()):
            part.encode("utf-8")
    assert rejection_for(raw, problems).marker == rejection_for(dict(raw), problems).marker


def test_a_rejection_is_built_for_any_body() -> None:
    for raw in (job(state=nested(5_000)), {"id": "x" * 10_000, "metadata": {"m": math.nan}}):
        rejection = rejection_for(raw, [FieldProblem("state", "too deep")])
        assert rejection.job_id.startswith(("j1", "invalid-")) and rejection.message.metadata == {}
        assert len(rejection.message.to_json()) < 1_000


def test_measure_walks_a_deep_value_without_recursion() -> None:
    found = json_measure.measure(nested(200_000), max_depth=1_000_000)
    assert found.problem is None and found.depth == 200_000 and found.objects == 200_000


def test_a_rejection_names_at_most_fifty_problems_and_counts_the_rest() -> None:
    items = [{"nested": {"too": "deep"}} if i % 2 else 12345 for i in range(10_000)]
    problems = [FieldProblem(f"items.{i}", "not a string or an object") for i in range(10_000)]
    problems += problems[:10]  # the same problem twice is named once
    raw = {"id": "big-sift", "kind": "sift", "reply_to": "r", "items": items}
    message = rejection_for(raw, problems).message
    assert len(message.problems) == MAX_PROBLEMS
    assert message.problems[-1] == {"field": "(more)", "message": "9951 more problems"}
    assert len(message.to_json()) < 5_000


def test_a_question_without_a_type_is_told_what_type_means() -> None:
    """The reason in the stream, as on the terminal: not pydantic's "Unable to extract tag
    using discriminator 'type'"."""
    for question, says in (
        ({"instructions": "?"}, 'a question needs "type": "noul", "choice" or "score"'),
        ({"type": "yesno", "instructions": "?"}, "no known type 'yesno'"),
    ):
        raw = {"id": "t", "reply_to": "r", "state": "s", "questions": {"q": question}}
        with pytest.raises(JobInvalid) as refused:
            parse_job(raw)
        [problem] = refused.value.problems
        assert problem.field == "questions.q" and says in problem.message
        assert "discriminator" not in rejection_for(raw, refused.value.problems).message.to_json()


def test_a_json_error_reads_as_one_sentence() -> None:
    """json says "Unterminated string starting at" and gives the place apart: the reason
    read "starting at at line 1 column 7" (issue 17: reasons a person understands)."""
    from shared import strict_json
    from shared.errors import NotStrictJSON

    with pytest.raises(NotStrictJSON) as info:
        strict_json.loads('{"a": "x')
    assert str(info.value) == "not JSON: Unterminated string starting at line 1 column 7"


@pytest.mark.parametrize(("levels", "said"), [(1, "1 level;"), (11, "11 levels;")])
def test_a_score_with_too_few_or_many_levels_says_how_many(levels: int, said: str) -> None:
    score = {"type": "score", "instructions": "x", "criteria": [f"l{i}" for i in range(levels)]}
    with pytest.raises(JobInvalid) as refused:
        parse_job({"id": "s", "state": "x", "questions": {"q": score}})
    assert any(said in problem.message for problem in refused.value.problems)
