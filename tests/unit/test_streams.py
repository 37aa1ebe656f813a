"""Publish once, and the client's iterator dropping duplicates (fakeredis with Lua)."""

from __future__ import annotations

import fakeredis
import pytest

from shared import keys
from shared.client import Client
from shared.replies import EscalationMessage, ResultMessage
from shared.settings import Settings
from shared.streams import publish_once, read_stream


@pytest.fixture
def r() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


def test_publishing_twice_appends_once(r: fakeredis.FakeRedis) -> None:
    message = ResultMessage(job_id="j1").to_json()
    first = publish_once(r, stream="s", job_id="j1", message_type="result", message_json=message)
    second = publish_once(r, stream="s", job_id="j1", message_type="result", message_json=message)
    assert (first, second) == (True, False)
    assert [e.job_id for e in read_stream(r, "s")] == ["j1"]


def test_an_escalation_goes_to_both_streams_once(r: fakeredis.FakeRedis) -> None:
    message = EscalationMessage(job_id="j2", reason="decision_refused").to_json()
    for _ in range(3):
        publish_once(
            r,
            stream="s",
            job_id="j2",
            message_type="escalation",
            message_json=message,
            escalation=True,
        )
    assert [e.type for e in read_stream(r, "s")] == ["escalation"]
    esc = list(read_stream(r, keys.ESCALATION_STREAM))
    assert len(esc) == 1 and esc[0].fields["reply_to"] == "s"


def test_the_marker_is_per_stream(r: fakeredis.FakeRedis) -> None:
    message = ResultMessage(job_id="j3").to_json()
    publish_once(r, stream="a", job_id="j3", message_type="result", message_json=message)
    assert publish_once(r, stream="b", job_id="j3", message_type="result", message_json=message)


def test_read_stream_pages_through_everything(r: fakeredis.FakeRedis) -> None:
    for i in range(25):
        publish_once(
            r,
            stream="p",
            job_id=f"j{i}",
            message_type="result",
            message_json=ResultMessage(job_id=f"j{i}").to_json(),
        )
    assert [e.job_id for e in read_stream(r, "p", count=7)] == [f"j{i}" for i in range(25)]


def test_client_replies_drop_a_duplicate_and_stop_when_all_replied(r: fakeredis.FakeRedis) -> None:
    for job_id in ["a", "b", "a"]:  # "a" re-published raw, as after a crash without the marker
        r.xadd(
            "dup",
            {"job_id": job_id, "type": "result", "message": ResultMessage(job_id=job_id).to_json()},
        )
    client = Client(Settings(), redis_client=r)
    got = [reply.job_id for reply in client.replies("dup", job_ids=["a", "b"], timeout_s=5)]
    assert got == ["a", "b"]
    assert [reply.job_id for reply in client.replies("dup")] == ["a", "b"]
