"""Messages that ask to wait (an ``eta`` or ``countdown``) or to be dropped (``expires``).

A short wait is the worker's own retry (``autoretry_for``, with backoff): it must run. A
wait beyond the deadline ceiling, or an ``expires``, is refused.

The project's producers never set either, but anyone who can write to the broker can, and a
raw Celery producer does with ``apply_async(countdown=...)``. Before the guard read them: a
message with an ``eta`` ten years ahead was taken and held in the worker's memory for good
(kombu's visibility timeout then puts it back for another worker to hold too), its jobs
never answered; one whose ``expires`` had passed was acknowledged as revoked and its jobs
were never answered either. Jobs have deadlines, not schedules: such a message's jobs are
rejected naming the header, at once.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from shared import keys
from shared.streams import StreamEntry
from tests.faults.conftest import FleetFactory
from tests.support.envelopes import raw_envelope, task_body
from tests.support.fleet import decide_job, profile

pytestmark = pytest.mark.faults


def _reply(entries: list[StreamEntry], job_id: str) -> StreamEntry | None:
    return next((entry for entry in entries if entry.job_id == job_id), None)


def test_a_message_that_asks_to_wait_or_expire_is_rejected_at_once(
    new_fleet: FleetFactory,
) -> None:
    crew = new_fleet("scheduled")
    worker = crew.start_worker()
    later = (datetime.now(UTC) + timedelta(days=3650)).isoformat()
    gone = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    asked = {
        "eta": decide_job("scheduled-eta", reply_to=crew.stream),
        "expires": decide_job("scheduled-expired", reply_to=crew.stream),
    }
    retried = decide_job("scheduled-retry", reply_to=crew.stream)
    crew.broker.lpush(
        keys.CELERY_QUEUE, json.dumps(raw_envelope(task_body(retried), headers={"eta": soon}))
    )
    # Found by an attack: a job passed positionally (the task's one argument) with an eta
    # ten years ahead ran at once, its scheduling problem unchecked; and an eta that is due
    # but that Celery cannot convert (the first day, a day's offset east of UTC) made
    # Celery log a traceback and drop the message, its job never answered.
    positional = decide_job("scheduled-eta-positional", reply_to=crew.stream)
    crew.broker.lpush(
        keys.CELERY_QUEUE,
        json.dumps(raw_envelope(json.dumps([[[positional]], {}, {}]).encode(),
                                headers={"eta": later})),
    )
    due = decide_job("scheduled-eta-first-day", reply_to=crew.stream)
    crew.broker.lpush(
        keys.CELERY_QUEUE,
        json.dumps(raw_envelope(task_body(due), headers={"eta": "0001-01-01T00:00:00+23:59"})),
    )
    crew.broker.lpush(
        keys.CELERY_QUEUE, json.dumps(raw_envelope(task_body(asked["eta"]), headers={"eta": later}))
    )
    crew.broker.lpush(
        keys.CELERY_QUEUE,
        json.dumps(raw_envelope(task_body(asked["expires"]), headers={"expires": gone})),
    )
    good = crew.jobs(2, "around")
    crew.submit(good)
    pairs = crew.pairs([job["id"] for job in (*asked.values(), retried, positional, due, *good)])
    crew.expect_replies(pairs, timeout_s=60)
    entries = crew.entries()
    for header, job in [*asked.items(), ("eta", positional)]:
        reply = _reply(entries, job["id"])
        assert reply is not None and reply.type == "rejected", reply
        assert [p["field"] for p in json.loads(reply.message)["problems"]] == [header]
    assert "Traceback" not in worker.text()
    for job in (*good, retried, due):
        reply = _reply(entries, job["id"])
        assert reply is not None and reply.type == "result", reply
    assert worker.alive()
    # Nothing held: every message is acknowledged (a held one stays in kombu's unacked hash;
    # the last reply may come a moment before its message's acknowledgement).
    until = time.monotonic() + 30
    while crew.broker.hlen("unacked") and time.monotonic() < until:
        time.sleep(0.1)
    assert crew.broker.hlen("unacked") == 0


def test_a_retry_whose_eta_a_fast_clock_set_runs_after_its_backoff_and_is_answered_once(
    new_fleet: FleetFactory,
) -> None:
    # Found by an attack: a worker whose clock ran an hour fast retried a chunk (a Redis
    # blip) with an eta an hour ahead by the reading worker's clock; its jobs were
    # rejected, and the reaper later published each one's stored result too: two terminal
    # messages a job. A retry's eta is the fleet's own: however far a skewed clock put it,
    # its jobs run after the longest backoff (their deadlines come from the ledger's clock).
    crew = new_fleet("skewed")
    worker = crew.start_worker()
    skewed = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    retried = decide_job("skewed-retry", reply_to=crew.stream)
    envelope = raw_envelope(task_body(retried), headers={"eta": skewed, "retries": 1})
    crew.broker.lpush(keys.CELERY_QUEUE, json.dumps(envelope))
    crew.expect_replies(crew.pairs([retried["id"]]), timeout_s=60)
    time.sleep(1)  # a second terminal message would follow the first at once
    replies = [entry for entry in crew.entries() if entry.job_id == retried["id"]]
    assert [entry.type for entry in replies] == ["result"]
    assert worker.alive()


@pytest.mark.parametrize("pool", ["prefork", "loop"])
def test_headers_celery_would_misread_leave_their_jobs_answered(
    new_fleet: FleetFactory, pool: str
) -> None:
    """Found by an attack on this session's fixes: an eta a few seconds ahead spelled so
    that Python reads it and Celery's parser does not ("+00:00:00", ".Z") was dropped by
    Celery with a traceback, its job unanswered; a message's timelimit of ["x", "y"] stopped
    a prefork worker's consumer (and the next worker's, the message put back), and one of
    [1e-6, 1e-6] killed the task, its job unanswered. A kept eta is rewritten in one
    spelling; a message's timelimit is replaced by the task's own, whatever its shape, and
    stamps Celery could not read are dropped (``guard.disarm``)."""
    crew = new_fleet(f"misread-{pool}", profile(3, worker_pool=pool))
    worker = crew.start_worker()
    soon = (datetime.now(UTC) + timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%S")
    headers = {
        "eta-seconds-offset": {"eta": soon + "+00:00:00"},
        "eta-dot-z": {"eta": soon + ".Z"},
        "timelimit-text": {"timelimit": ["x", "y"]},
        "timelimit-tiny": {"timelimit": [1e-6, 1e-6]},
        # A third attack: refused whole (not a pair), or dropped after the guard (Celery's
        # revocation check raised on a list in stamped_headers), their jobs unanswered.
        "timelimit-number": {"timelimit": 30},
        "timelimit-object": {"timelimit": {"soft": 10, "hard": 20}},
        "timelimit-three": {"timelimit": [10, 20, None]},
        "stamped-list": {"stamped_headers": [["a"]], "stamps": {}},
        "stamps-list": {"stamped_headers": ["a"], "stamps": ["a"]},
    }
    jobs = {name: decide_job(f"misread-{pool}-{name}", reply_to=crew.stream) for name in headers}
    for name, job in jobs.items():
        crew.broker.lpush(
            keys.CELERY_QUEUE, json.dumps(raw_envelope(task_body(job), headers=headers[name]))
        )
    good = crew.jobs(2, "after")
    crew.submit(good)
    pairs = crew.pairs([job["id"] for job in (*jobs.values(), *good)])
    crew.expect_replies(pairs, timeout_s=60)
    entries = crew.entries()
    for job in (*jobs.values(), *good):
        replies = [entry for entry in entries if entry.job_id == job["id"]]
        assert [reply.type for reply in replies] == ["result"], (job["id"], replies)
    assert worker.alive()
    assert "Traceback" not in worker.text()
