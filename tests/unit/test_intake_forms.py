"""The stored forms of intake records (``shared.intake``) are the JSON the reaper reads back:
written out by hand for speed, they must stay byte for byte what ``json.dumps`` writes, for
any text a stream name, job id or message id can hold."""

from __future__ import annotations

import json

import pytest

from shared.intake import IntakeRecord, intake_member, member_job_id

TEXTS = [
    "job-1",
    "bench:replies",
    'quote " and backslash \\',
    "new\nline\ttab\x00nul\x1f",
    "é ü 漢字 \u2028\u2029",
    "emoji \U0001f600",
    "lone \ud800 surrogate",
    "",
]


@pytest.mark.parametrize("reply_to", [None, *TEXTS])
@pytest.mark.parametrize("job_id", TEXTS)
def test_an_intake_member_is_the_json_pair(reply_to: str | None, job_id: str) -> None:
    member = intake_member(reply_to, job_id)
    assert member == json.dumps([reply_to, job_id], ensure_ascii=False, separators=(",", ":"))
    assert member_job_id(member) == job_id


@pytest.mark.parametrize("message_id", TEXTS)
def test_a_record_reads_back_as_written(message_id: str) -> None:
    job_json = json.dumps({"id": "j", "kind": "decide"})
    text = IntakeRecord.text(message_id, job_json, attempts=2)
    assert text.startswith(IntakeRecord.prefix(message_id))
    job = {"id": "j", "kind": "decide"}
    assert json.loads(text) == {"message": message_id, "attempts": 2, "job": job}
    assert IntakeRecord.prefix(message_id) == '{"message":' + json.dumps(message_id) + ","
