"""Publish once, and the client's iterator dropping duplicates (fakeredis with Lua)."""

from __future__ import annotations

import logging

import fakeredis
import pytest

from shared import keys
from shared.client import Client
from shared.errors import PublishFailed
from shared.replies import EscalationMessage, ResultMessage
from shared.settings import Settings
from shared.streams import (
    ESCALATION_ADDED,
    REPLY_ADDED,
    Publication,
    publish_many,
    publish_once,
    read_entries,
    read_stream,
    republish,
)
from worker.delivery.sinks import MemorySink


@pytest.fixture
def r() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


def result(job_id: str) -> str:
    return ResultMessage(job_id=job_id).to_json()


def escalate(r: fakeredis.FakeRedis, stream: str, job_id: str) -> bool:
    return publish_once(
        r,
        stream=stream,
        job_id=job_id,
        message_type="escalation",
        message_json=EscalationMessage(job_id=job_id, reason="decision_refused").to_json(),
        escalation=True,
    )


def test_publishing_twice_appends_once(r: fakeredis.FakeRedis) -> None:
    message = result("j1")
    first = publish_once(r, stream="s", job_id="j1", message_type="result", message_json=message)
    second = publish_once(r, stream="s", job_id="j1", message_type="result", message_json=message)
    assert (first, second) == (True, False)
    assert [e.job_id for e in read_stream(r, "s")] == ["j1"]


def test_an_escalation_goes_to_both_streams_once(r: fakeredis.FakeRedis) -> None:
    for _ in range(3):
        escalate(r, "s", "j2")
    assert [e.type for e in read_stream(r, "s")] == ["escalation"]
    esc = list(read_entries(r, keys.ESCALATION_STREAM))
    assert len(esc) == 1 and esc[0].fields["reply_to"] == "s"


def test_the_marker_is_per_stream(r: fakeredis.FakeRedis) -> None:
    message = result("j3")
    publish_once(r, stream="a", job_id="j3", message_type="result", message_json=message)
    assert publish_once(r, stream="b", job_id="j3", message_type="result", message_json=message)


def test_read_stream_pages_through_everything(r: fakeredis.FakeRedis) -> None:
    for i in range(25):
        publish_once(
            r, stream="p", job_id=f"j{i}", message_type="result", message_json=result(f"j{i}")
        )
    assert [e.job_id for e in read_stream(r, "p", count=7)] == [f"j{i}" for i in range(25)]


def test_client_replies_drop_a_duplicate_and_stop_when_all_replied(r: fakeredis.FakeRedis) -> None:
    for job_id in ["a", "b", "a"]:  # "a" re-published raw, as after a crash without the marker
        r.xadd(
            keys.reply_stream("dup"),
            {"job_id": job_id, "type": "result", "message": result(job_id)},
        )
    client = Client(Settings(), redis_client=r)
    got = [reply.job_id for reply in client.replies("dup", job_ids=["a", "b"], timeout_s=5)]
    assert got == ["a", "b"]
    assert [reply.job_id for reply in client.replies("dup")] == ["a", "b"]


@pytest.mark.parametrize(
    "bad",
    [
        '{"job_id": "b", "type": "result", "a_newer_field": 1}',
        "[" * 100_000 + "]" * 100_000,
        "{not json",
    ],
)
def test_client_replies_skip_an_entry_that_is_not_a_reply_and_keep_the_job_s_real_one(
    r: fakeredis.FakeRedis, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    stream = keys.reply_stream("mixed")
    r.xadd(stream, {"job_id": "a", "type": "result", "message": result("a")})
    r.xadd(stream, {"job_id": "b", "type": "result", "message": bad})
    r.xadd(stream, {"job_id": "c", "type": "result", "message": result("c")})
    r.xadd(stream, {"job_id": "b", "type": "result", "message": result("b")})
    client = Client(Settings(), redis_client=r)
    with caplog.at_level(logging.WARNING):
        got = [reply.job_id for reply in client.replies("mixed", job_ids=["a", "b", "c"])]
    assert got == ["a", "c", "b"]
    assert "skipped reply entry" in caplog.text and "not a reply" in caplog.text
    assert [reply.job_id for reply in client.replies("mixed")] == ["a", "c", "b"]


def test_a_stored_estimate_of_another_shape_is_no_estimate(r: fakeredis.FakeRedis) -> None:
    r.set(keys.batch_estimate("b1"), '{"batch": "b1"}')
    r.set(keys.batch_estimate("b2"), "[" * 100_000 + "]" * 100_000)
    client = Client(Settings(), redis_client=r)
    assert client.stored_estimate("b1") is None and client.stored_estimate("b2") is None


# --- #15 defect 1: a publish that wrote nothing is not marked published ----------------------


def test_a_refused_publish_raises_leaves_no_marker_and_is_logged(
    r: fakeredis.FakeRedis, caplog: pytest.LogCaptureFixture
) -> None:
    r.rpush(keys.reply_stream("taken"), "not a stream")
    with caplog.at_level(logging.ERROR), pytest.raises(PublishFailed, match="WRONGTYPE"):
        publish_once(r, stream="taken", job_id="j1", message_type="result", message_json="{}")
    assert r.exists(keys.published_marker("taken", "j1")) == 0
    [line] = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
    assert "j1" in line and "'taken'" in line and "outbox" in line
    # Once the key is a stream again, the relay's publish writes it: it was never marked.
    r.delete(keys.reply_stream("taken"))
    message = result("j1")
    assert publish_once(r, stream="taken", job_id="j1", message_type="result", message_json=message)
    assert [e.job_id for e in read_stream(r, "taken")] == ["j1"]


def test_an_escalation_stream_that_is_not_a_stream_writes_nothing_anywhere(
    r: fakeredis.FakeRedis,
) -> None:
    r.set(keys.ESCALATION_STREAM, "oops")
    with pytest.raises(PublishFailed):
        escalate(r, "s", "j1")
    assert r.exists(keys.reply_stream("s"), keys.published_marker("s", "j1")) == 0
    assert r.exists(keys.escalation_marker("j1")) == 0


def test_publish_many_reports_each_refusal_and_writes_the_others(r: fakeredis.FakeRedis) -> None:
    r.rpush(keys.reply_stream("bad"), "x")
    answers = publish_many(
        r,
        [
            Publication("good", "a", "result", result("a")),
            Publication("bad", "b", "result", result("b")),
            Publication("good", "c", "result", result("c")),
        ],
    )
    assert answers[0] is True and answers[2] is True
    assert isinstance(answers[1], PublishFailed)
    assert r.exists(keys.published_marker("bad", "b")) == 0


def test_publish_many_loads_a_script_redis_forgot_and_still_appends_once(
    r: fakeredis.FakeRedis,
) -> None:
    # publish_many calls the script by its SHA (one round trip, no SCRIPT EXISTS first): a
    # Redis that never saw it, or flushed its scripts, answers NOSCRIPT and ran nothing.
    first = Publication("s", "a", "result", result("a"))
    assert publish_many(r, [first]) == [True]
    r.script_flush()
    answers = publish_many(r, [first, Publication("s", "b", "result", result("b"))])
    assert answers == [False, True]  # "a" was published before: its marker kept it out
    assert [e.job_id for e in read_stream(r, "s")] == ["a", "b"]


# --- #15 defect 2: markers of different (stream, job) pairs never collide ---------------------


def test_ids_holding_colons_have_their_own_markers(r: fakeredis.FakeRedis) -> None:
    # Before: both were decisions:published:tenantA:x:7, and the second reply was dropped.
    assert publish_once(
        r, stream="tenantA", job_id="x:7", message_type="result", message_json=result("x:7")
    )
    assert publish_once(
        r, stream="tenantA:x", job_id="7", message_type="result", message_json=result("7")
    )
    assert [e.job_id for e in read_stream(r, "tenantA:x")] == ["7"]


def test_a_rejection_marker_is_never_a_job_ids_marker(r: fakeredis.FakeRedis) -> None:
    publish_once(
        r, stream="s", job_id="x", message_type="rejected", message_json="{}", marker="rejected:d"
    )
    assert publish_once(
        r, stream="s", job_id="rejected:d", message_type="result", message_json=result("x")
    )


# --- #15 defect 3: one escalation entry a job, whatever stream ------------------------------


def test_the_same_job_on_two_reply_streams_is_escalated_once(r: fakeredis.FakeRedis) -> None:
    assert escalate(r, "tenant-a", "j9")
    assert escalate(r, "tenant-b", "j9")  # its own reply stream gets the message
    assert [e.job_id for e in read_stream(r, "tenant-b")] == ["j9"]
    entries = list(read_entries(r, keys.ESCALATION_STREAM))
    assert [(e.job_id, e.fields["reply_to"]) for e in entries] == [("j9", "tenant-a")]


def test_a_resolved_job_is_not_escalated_again(r: fakeredis.FakeRedis) -> None:
    r.hset(keys.resolved_record("j4"), mapping={"reviewer": "ann"})
    escalate(r, "s", "j4")
    assert list(read_entries(r, keys.ESCALATION_STREAM)) == []


def test_the_memory_sink_escalates_a_job_once_too() -> None:
    sink = MemorySink()
    for stream in ("a", "b", "a"):
        sink.publish(Publication(stream, "j", "escalation", "{}", escalation=True))
    assert [(m.stream, m.escalation) for m in sink.snapshot()] == [("a", True), ("b", False)]


# --- #15 deliverable 5: republish what a stream lost, each at most once -----------------------


def test_republish_writes_what_a_flushed_redis_lost_once(r: fakeredis.FakeRedis) -> None:
    pubs = [
        Publication("s", "r1", "result", result("r1")),
        Publication(
            "s",
            "e1",
            "escalation",
            EscalationMessage(job_id="e1", reason="low_confidence").to_json(),
            escalation=True,
        ),
    ]
    assert publish_many(r, pubs) == [True, True]
    assert republish(r, pubs) == [0, 0]  # nothing was lost: nothing written
    r.flushall()  # a restart without persistence
    assert republish(r, pubs) == [REPLY_ADDED, REPLY_ADDED | ESCALATION_ADDED]
    assert republish(r, pubs) == [0, 0]
    assert [e.job_id for e in read_stream(r, "s")] == ["r1", "e1"]
    assert [e.job_id for e in read_entries(r, keys.ESCALATION_STREAM)] == ["e1"]
    # The normal publish sees the markers: a late relay adds nothing either.
    assert publish_many(r, pubs) == [False, False]


def test_republish_ignores_a_marker_whose_entry_is_gone(r: fakeredis.FakeRedis) -> None:
    pub = Publication("s", "r1", "result", result("r1"))
    publish_many(r, [pub])
    r.delete(keys.reply_stream("s"))  # the stream lost, its markers kept
    assert publish_many(r, [pub]) == [False]  # the live path trusts its marker
    assert republish(r, [pub]) == [REPLY_ADDED]
    assert [e.job_id for e in read_stream(r, "s")] == ["r1"]


# --- #16 deliverable 3: reply streams in their own namespace ---------------------------------


@pytest.mark.parametrize("name", ["decisions", "decisions:escalations", "unacked_index"])
def test_a_reply_stream_named_like_an_internal_key_never_touches_it(
    r: fakeredis.FakeRedis, name: str
) -> None:
    r.rpush("decisions", "a queued task")
    r.zadd("unacked_index", {"tag": 1.0})
    escalate(r, "s", "first")
    before = {k: r.type(k) for k in ("decisions", "unacked_index", keys.ESCALATION_STREAM)}
    assert publish_once(r, stream=name, job_id="j", message_type="result", message_json="{}")
    after = {k: r.type(k) for k in ("decisions", "unacked_index", keys.ESCALATION_STREAM)}
    assert after == before
    assert r.llen("decisions") == 1 and r.zcard("unacked_index") == 1
    assert r.xlen(keys.ESCALATION_STREAM) == 1
    assert [e.job_id for e in read_stream(r, name)] == ["j"]
