"""The decide job contract: what validates, what is rejected, and the field it names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import JobInvalid
from shared.jobs import job_deadline, job_fingerprint, parse_job


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
