"""The reviewers' queue on a real Redis: claim, release, resolve, and a vanished reviewer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis

from shared.errors import EscalationNotFound, ResolutionInvalid
from shared.escalations import EscalationQueue
from shared.jobs import parse_job
from shared.replies import Answer
from shared.streams import publish_once, read_stream
from tests.support.services import redis_database
from worker.verdicts import escalation

pytestmark = pytest.mark.integration

REDIS_DB = 10
STREAM = "esc-test:escalations"


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def job(job_id: str, batch: str = "b1") -> object:
    return parse_job(
        {
            "id": job_id,
            "reply_to": "esc-test:replies",
            "batch": batch,
            "state": "s",
            "questions": {
                "urgent": {"type": "noul", "instructions": "Urgent?"},
                "team": {
                    "type": "choice",
                    "instructions": "Team?",
                    "criteria": {"billing": None, "sales": None},
                },
                "mood": {
                    "type": "score",
                    "instructions": "Mood?",
                    "criteria": ["calm", "cross", "livid"],
                },
            },
        }
    )


def escalate(
    r: redis.Redis, job_id: str, reason: str = "decision_refused", batch: str = "b1"
) -> None:
    answers = {
        "urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8),
        "team": Answer(type="choice", refused=True),
        "mood": Answer(type="score", value=1.2, confidence=0.9),
    }
    message = escalation(job(job_id, batch), reason, "test", [], answers)  # type: ignore[arg-type]
    publish_once(
        r,
        stream="esc-test:replies",
        job_id=job_id,
        message_type="escalation",
        message_json=message.to_json(),
        escalation=True,
        escalation_stream=STREAM,
    )


def queue(r: redis.Redis, idle_s: float = 900.0) -> EscalationQueue:
    return EscalationQueue(r, stream=STREAM, claim_idle_s=idle_s)


def test_two_reviewers_never_hold_the_same_escalation(r: redis.Redis) -> None:
    escalate(r, "j1")
    ann, bob = queue(r), queue(r)
    first = ann.claim("ann")
    assert first is not None and first.message.job_id == "j1"
    assert bob.claim("bob") is None
    assert [(e.message.job_id, e.holder) for e in bob.open()] == [("j1", "ann")]


def test_claims_come_oldest_first_and_filter_by_reason_and_batch(r: redis.Redis) -> None:
    escalate(r, "j1", "decision_refused", "b1")
    escalate(r, "j2", "low_confidence", "b2")
    escalate(r, "j3", "decision_refused", "b2")
    q = queue(r)
    assert q.claim("ann", reason="low_confidence").message.job_id == "j2"  # type: ignore[union-attr]
    assert q.claim("ann", batch="b2").message.job_id == "j3"  # type: ignore[union-attr]
    assert q.claim("ann").message.job_id == "j1"  # type: ignore[union-attr]
    assert q.claim("ann") is None


def test_release_returns_it_to_the_queue(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(EscalationNotFound):
        q.release(item.entry_id, "bob")
    q.release(item.entry_id, "ann")
    assert q.claim("bob").message.job_id == "j1"  # type: ignore[union-attr]


def test_a_vanished_reviewers_escalation_returns_after_the_idle_time(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r, idle_s=0.3)
    assert q.claim("ann") is not None
    assert q.claim("bob") is None
    time.sleep(0.4)
    again = q.claim("bob")
    assert again is not None and again.holder == "bob"


def test_resolve_checks_the_answer_publishes_the_resolution_and_closes(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(ResolutionInvalid) as bad:
        q.resolve(item.entry_id, "ann", {"team": "marketing"})
    assert [p.field for p in bad.value.problems] == ["answer.team"]
    with pytest.raises(ResolutionInvalid) as missing:
        q.resolve(item.entry_id, "ann", {"urgent": False})
    assert [p.field for p in missing.value.problems] == ["answer.team"]
    with pytest.raises(EscalationNotFound):
        q.resolve(item.entry_id, "bob", {"team": "sales"})
    resolution = q.resolve(item.entry_id, "ann", {"team": "sales", "mood": "livid"})
    # The machine's usable answers stand where the reviewer gave none; a label maps to its index.
    assert resolution.answer == {"team": "sales", "mood": 2, "urgent": True}
    replies = [e for e in read_stream(r, "esc-test:replies") if e.type == "resolution"]
    assert len(replies) == 1 and json.loads(replies[0].message)["reviewer"] == "ann"
    assert q.open() == []


def test_an_interrupted_decision_needs_every_question_answered(r: redis.Redis) -> None:
    escalate(r, "j9", "decision_interrupted")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(ResolutionInvalid) as bad:
        q.resolve(item.entry_id, "ann", {"team": "sales", "urgent": "yes"})
    assert sorted(p.field for p in bad.value.problems) == ["answer.mood", "answer.urgent"]
