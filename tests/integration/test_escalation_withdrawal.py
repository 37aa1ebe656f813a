"""``withdraw_escalations``: a resumed job's first escalation leaves the reviewers' queue.

Before, ``decisions budget resume`` left it there: a reviewer who resolved it after the
resume published a resolution for a job that also got the resumed run's result (acted on
twice), and the job's escalation marker kept the resumed run's own escalation out of the
queue. Real Redis: the withdrawal and the resolve are Lua calls, and their order is what is
tested.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared import keys
from shared.errors import EscalationNotFound
from shared.escalation_withdrawal import withdraw_escalations
from shared.escalations import EscalationQueue
from shared.job_parsing import parse_job
from shared.streams import publish_once
from shared.verdicts import escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database

REDIS_DB = 4


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def _escalate(r: redis.Redis, job_id: str, marker: str | None = None) -> None:
    job = parse_job(
        {
            "id": job_id,
            "batch": "b1",
            "reply_to": "replies",
            "state": "a ticket",
            "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        }
    )
    message = escalation(job, "budget_exhausted", "the batch's budget is spent", [])
    publish_once(
        r,
        stream="replies",
        job_id=job_id,
        message_type="escalation",
        message_json=message.to_json(),
        escalation=True,
        marker=marker,
    )


def _open_jobs(queue: EscalationQueue) -> list[str]:
    return sorted(item.message.job_id for item in open_escalations(queue))


def test_withdrawn_jobs_leave_the_queue_and_a_resolved_one_is_left_alone(r: redis.Redis) -> None:
    for job_id in ("a", "b", "c", "other"):
        _escalate(r, job_id)
    queue = EscalationQueue(r)
    taken = queue.claim("ann")
    assert taken is not None and taken.message.job_id == "a"
    resolved = queue.claim("bob")
    assert resolved is not None and resolved.message.job_id == "b"
    queue.resolve(resolved.entry_id, "bob", {"q": True})

    done = withdraw_escalations(r, ["a", "b", "c", "never-escalated"])

    assert done.withdrawn == {"a", "c", "never-escalated"}
    assert done.resolved == {"b"}
    assert _open_jobs(queue) == ["other"]
    # The reviewer who held a's entry can no longer answer it: no second action on a.
    with pytest.raises(EscalationNotFound):
        queue.resolve(taken.entry_id, "ann", {"q": True})
    assert r.exists(keys.resolved_record("a")) == 0
    # b's resolution stands, on its reply stream.
    assert queue.resolution_of("b") is not None


def test_a_withdrawn_jobs_next_escalation_enters_the_queue(r: redis.Redis) -> None:
    _escalate(r, "a")
    queue = EscalationQueue(r)
    assert _open_jobs(queue) == ["a"]
    withdraw_escalations(r, ["a"])
    assert _open_jobs(queue) == []
    # The resumed run escalates again (its reply under the resume's own marker).
    _escalate(r, "a", marker="resume.1:a")
    assert _open_jobs(queue) == ["a"]


def test_entries_never_read_by_a_reviewer_are_withdrawn_too(r: redis.Redis) -> None:
    """No group yet (no reviewer ever looked): the entries are deleted all the same."""
    for i in range(3):
        _escalate(r, f"j{i}")
    done = withdraw_escalations(r, ["j0", "j2"])
    assert done.withdrawn == {"j0", "j2"}
    assert _open_jobs(EscalationQueue(r)) == ["j1"]


def test_no_escalation_stream_at_all(r: redis.Redis) -> None:
    done = withdraw_escalations(r, ["a"])
    assert done.withdrawn == {"a"}
    r.set(keys.ESCALATION_STREAM, "not a stream")
    assert withdraw_escalations(r, ["a"]).withdrawn == {"a"}
