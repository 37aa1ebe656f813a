"""A job's size is its compact JSON's exact byte count: escapes, digits and separators.

``DECISIONS_MAX_JOB_BYTES`` and the per-field limits are promises about bytes. A size
estimated per value (every number 8 bytes, every character of a string one) let a job of
control characters, quotes or long numbers pass its limit several times over.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shared import json_measure
from shared.limits import Limits, job_problems


def compact(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**99), max_value=10**99)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(values)
def test_the_size_of_any_strict_value_is_its_compact_json_in_utf8(value: Any) -> None:
    found = json_measure.measure(value, max_depth=1_000)
    assert found.problem is None and found.size == compact(value)


def test_escapes_and_long_numbers_count_as_the_bytes_they_are_written_as() -> None:
    for value in (
        "\x01" * 10,  # \u0001: six bytes each
        '"\\\n\t',  # two bytes each
        {"k\x1f": [-1.2345678901234567e-300, -(10**99), True, None, False, [], {}]},
        ["\u2028é\U0001f600", 0.1, 10**20],
    ):
        assert json_measure.measure(value, max_depth=10).size == compact(value), value


def test_a_state_of_control_characters_is_held_to_its_limit() -> None:
    limits = Limits(state_bytes=60_000, job_bytes=100_000)
    # 20,000 characters, 120,002 bytes of JSON: twice the state's limit, over the job's.
    problems = job_problems({"id": "c", "reply_to": "r", "state": "\x01" * 20_000}, limits)
    assert [p.field for p in problems] == ["state"]
    assert "120002 bytes" in problems[0].message or "over 60000" in problems[0].message


def test_a_job_of_quotes_in_short_fields_is_held_to_the_job_limit() -> None:
    limits = Limits(job_bytes=2_000, string_bytes=64 * 1024)
    fields = {f"f{i}": '"' * 100 for i in range(15)}  # 15 x 202 bytes: 3,030 > 2,000
    problems = job_problems({"id": "q", "reply_to": "r", **fields}, limits)
    assert [p.field for p in problems] == ["(job)"], problems


def test_a_job_just_at_its_limit_passes_and_one_byte_more_does_not() -> None:
    job = {"id": "x", "reply_to": "r", "metadata": {"a": 1}, "state": {"t": "\n"}}
    size = compact(job)
    assert job_problems(job, Limits(job_bytes=size)) == []
    assert [p.field for p in job_problems(job, Limits(job_bytes=size - 1))] == ["(job)"]
