"""The producer's submit path: what ``Client.validate`` stamps, and the state size check."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from shared.client import Client
from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.json_measure import measure
from shared.settings import Settings


def job(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j1",
        "kind": "decide",
        "state": {"body": "Help, payouts fail"},
        "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
        "timeout_s": 60,
    }
    base.update(over)
    return base


def client() -> Client:
    return Client(Settings())


NOW = datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)


def test_a_dict_is_stamped_with_now_and_its_reply_stream_and_left_untouched() -> None:
    raw = job()
    validated = client().validate(raw, reply_to="claims", now=NOW)
    assert validated.submitted_at == NOW and validated.reply_to == "claims"
    assert raw == job()  # the caller's dict is not changed


def test_a_given_submission_time_is_kept() -> None:
    earlier = (NOW - timedelta(seconds=5)).isoformat()
    validated = client().validate(job(submitted_at=earlier), reply_to="claims", now=NOW)
    assert validated.submitted_at == NOW - timedelta(seconds=5)


def test_a_null_submission_time_is_stamped() -> None:
    validated = client().validate(job(submitted_at=None), reply_to="claims", now=NOW)
    assert validated.submitted_at == NOW


def test_an_offset_now_is_stamped_as_given() -> None:
    paris = NOW.astimezone(timezone(timedelta(hours=1)))
    validated = client().validate(job(), reply_to="claims", now=paris)
    assert validated.submitted_at == paris and validated.submitted_at.utcoffset() is not None


def test_a_naive_now_is_still_stamped_after_validation() -> None:
    naive = NOW.replace(tzinfo=None)
    validated = client().validate(job(), reply_to="claims", now=naive)
    assert validated.submitted_at == naive


def test_json_text_and_job_objects_are_stamped_too() -> None:
    text = json.dumps(job(reply_to="claims"))
    assert client().validate(text, now=NOW).submitted_at == NOW
    model = parse_job(job(reply_to="claims"))
    assert isinstance(model, DecideJob) and model.submitted_at is None
    assert client().validate(model, now=NOW).submitted_at == NOW


def test_the_stamped_job_dumps_as_the_copied_one_did() -> None:
    stamped = client().validate(job(), reply_to="claims", now=NOW)
    copied = parse_job(job(reply_to="claims")).model_copy(update={"submitted_at": NOW})
    assert stamped.model_dump(mode="json", exclude_none=True) == copied.model_dump(
        mode="json", exclude_none=True
    )


def test_a_deadline_problem_is_named_with_the_stamp_in_place() -> None:
    with pytest.raises(JobInvalid) as info:
        client().validate(job(timeout_s=None, deadline=NOW.isoformat()), reply_to="c", now=NOW)
    assert [p.field for p in info.value.problems] == ["deadline"]


@pytest.mark.parametrize(
    "state",
    ["plain", "café ☕", {"a": [1, 2.5, None, True], "b": "ü\x01\"\\"}, ["x", {"y": "€"}], ""],
)
def test_a_state_is_measured_as_its_compact_utf8_json(state: Any) -> None:
    exact = len(json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode())
    # Escapes and number digits are estimated: within a few bytes a value.
    assert abs(measure(state, max_depth=100).size - exact) <= 8 * 4


def test_a_state_with_a_lone_surrogate_is_rejected_by_name() -> None:
    with pytest.raises(JobInvalid) as info:
        parse_job(job(reply_to="claims", state={"body": "\ud800"}))
    assert [p.field for p in info.value.problems] == ["state.body"]
