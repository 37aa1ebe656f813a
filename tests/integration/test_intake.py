"""Intake records on a real Redis (``shared.intake``, ``worker.recovery.intake``): what the client
records before publishing, how a reaper takes them (once, however many reapers), what it
finds the broker holding, and what it republishes."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from shared import keys
from shared.client import Client, SubmitReport
from shared.intake import IntakeBook, intake_member
from shared.settings import Settings
from tests.support.fleet import decide_job
from tests.support.services import redis_database, redis_url
from worker.ledger import Ledger
from worker.recovery.intake import forget_ran, held_message_ids, recover_intake, send_jobs

pytestmark = pytest.mark.integration

REDIS_DB = 4


def settings_for(tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,
        broker_url=redis_url(REDIS_DB),
        redis_url=redis_url(REDIS_DB),
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )


def test_the_client_records_intake_before_publishing_and_a_worker_forgets_it(
    tmp_path: Path,
) -> None:
    with redis_database(REDIS_DB) as r:
        client = Client(settings_for(tmp_path), redis_client=r)
        jobs = [decide_job(f"in-{i}") for i in range(3)]
        report = client.submit_batch(jobs, reply_to="in:replies", chunk_size=2)
        assert report.messages == 2 and report.latest_deadline is not None
        members = [intake_member("in:replies", f"in-{i}") for i in range(3)]
        stored = r.hmget(keys.INTAKE_JOBS, members)
        records = [json.loads(text) for text in stored]
        assert [rec["job"]["id"] for rec in records] == ["in-0", "in-1", "in-2"]
        # Each names its message: the broker holds exactly those two.
        held = held_message_ids(r, stale_after_s=60)
        assert held == {rec["message"] for rec in records}
        assert r.zcard(keys.INTAKE_TIMES) == 3
        seconds, _ = r.time()
        assert all(
            abs(score - seconds) < 5
            for _, score in r.zrange(keys.INTAKE_TIMES, 0, -1, withscores=True)
        )
        book = IntakeBook(r)
        forget_ran(book, [{**jobs[0], "reply_to": "in:replies"}, {"not": "a job"}])
        assert r.zcard(keys.INTAKE_TIMES) == 2 and not r.hexists(keys.INTAKE_JOBS, members[0])


def test_a_record_is_taken_by_one_reaper_and_only_when_old_enough(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        book = IntakeBook(r)
        book.record([(intake_member("s", "j1"), '{"id": "j1"}')], "m-1")
        assert book.take(older_than_s=60, limit=10) == []
        time.sleep(1.1)
        first = book.take(older_than_s=1, limit=10)
        assert [rec.job_id for rec in first] == ["j1"] and first[0].message_id == "m-1"
        assert book.take(older_than_s=1, limit=10) == []  # re-timed: another reaper skips it


def test_recovery_republishes_only_what_neither_the_ledger_nor_the_broker_has(
    tmp_path: Path,
) -> None:
    with redis_database(REDIS_DB) as r:
        settings = settings_for(tmp_path)
        ledger = Ledger(settings.ledger_url)
        ledger.migrate()
        client = Client(settings, redis_client=r)
        jobs = [decide_job(f"rc-{i}") for i in range(4)]
        client.submit_batch(jobs, reply_to="rc:replies", chunk_size=1)  # four messages
        r.rpop(keys.CELERY_QUEUE)  # rc-0's message: lost in a pop window
        r.rpop(keys.CELERY_QUEUE)  # rc-1's: popped, but a worker finished the job
        ledger.open_job(
            job_id="rc-1",
            kind="decide",
            batch=None,
            reply_to="rc:replies",
            fingerprint="f",
            deadline=datetime.now(UTC) + timedelta(seconds=60),
            job_json="{}",
        )
        ledger.finish_job(job_id="rc-1", message_type="result", reason=None, message_json="{}")
        # rc-2's and rc-3's messages were delivered, not acknowledged: rc-3's just now, rc-2's
        # long ago (kombu's sweep, its mutex held by a killed worker, never put it back).
        time.sleep(1.1)  # every record is older than the 1 s the round is given below
        seconds, micros = r.time()
        for tag, age_s in (("tag-2", 100), ("tag-3", 0)):
            raw = r.rpop(keys.CELERY_QUEUE)
            assert raw is not None
            r.hset("unacked", tag, json.dumps([json.loads(raw), "", keys.CELERY_QUEUE]))
            r.zadd("unacked_index", {tag: seconds + micros / 1e6 - age_s})
        published: list[tuple[list[dict[str, Any]], str]] = []
        done = asyncio.run(
            recover_intake(
                ledger,
                IntakeBook(r),
                r,
                lambda jobs, message_id: published.append((jobs, message_id)),
                older_than_s=1,
                chunk_size=10,
            )
        )
        assert (done.taken, done.finished, done.held, done.republished) == (4, 1, 1, 2)
        [(sent, message_id)] = published
        assert sorted(job["id"] for job in sent) == ["rc-0", "rc-2"]
        # The record now names the new message; the finished one is gone.
        record = json.loads(r.hget(keys.INTAKE_JOBS, intake_member("rc:replies", "rc-0")))
        assert record["message"] == message_id and record["attempts"] == 1
        assert not r.hexists(keys.INTAKE_JOBS, intake_member("rc:replies", "rc-1"))
        ledger.dispose()


def submitted_and_lost(
    r: redis.Redis, settings: Settings, jobs: list[dict[str, Any]], reply_to: str
) -> SubmitReport:
    """``jobs`` submitted by a client, then their messages lost in a pop window, their
    intake records old enough for a reaper to take."""
    report = Client(settings, redis_client=r).submit_batch(jobs, reply_to=reply_to, chunk_size=10)
    r.delete(keys.CELERY_QUEUE)
    time.sleep(1.1)
    return report


def json_app(settings: Settings) -> Celery:
    """A Celery app on the settings' broker, JSON only, as the reaper's publishes through."""
    app = Celery("t", broker=settings.broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def test_recovery_republishes_big_jobs_in_messages_under_the_cap(tmp_path: Path) -> None:
    # Four jobs of about 300 KB each, under a 1 MiB cap: the client sent them two a message;
    # lost, they must come back in messages a worker takes, not one of four (dropped as
    # oversize, and the jobs with it).
    cap = 1024 * 1024
    with redis_database(REDIS_DB) as r:
        settings = settings_for(tmp_path).model_copy(update={"max_message_bytes": cap})
        ledger = Ledger(settings.ledger_url)
        ledger.migrate()
        jobs = [decide_job(f"big-{i}", state={"text": "x" * 300_000}) for i in range(4)]
        report = submitted_and_lost(r, settings, jobs, "big:replies")
        assert report.messages == 2  # the client's own split
        published: list[list[dict[str, Any]]] = []
        done = asyncio.run(
            recover_intake(
                ledger,
                IntakeBook(r),
                r,
                lambda jobs, _message_id: published.append(jobs),
                older_than_s=1,
                chunk_size=10,
                max_message_bytes=cap,
            )
        )
        assert done.republished == 4
        assert sorted(job["id"] for sent in published for job in sent) == [
            f"big-{i}" for i in range(4)
        ]
        assert len(published) > 1
        for sent in published:  # what kombu puts on the queue: base64 of the body's JSON
            assert len(json.dumps(sent)) * 4 / 3 < cap
        ledger.dispose()


#: A well-formed stored record; the canary is in its job's body, which no log line may carry.
RECORD = '{"message":"m-2","attempts":0,"job":{"id":"CANARY-BODY"}}'
#: A record no reader can make sense of (a hand edit, a truncated write, another program's key),
#: as (member, stored text).
UNREADABLE: dict[str, tuple[str | bytes, str | bytes]] = {
    "record not JSON": ('["u","bad"]', RECORD[:-2]),
    "member not JSON": ("not-json", RECORD),
    "member not a pair": ('"ab"', RECORD),
    "member not UTF-8": (b'["u","\xff"]', RECORD),
    "record not an object": ('["u","bad"]', '["CANARY-BODY",2]'),
    "no message": ('["u","bad"]', RECORD.replace('"message":"m-2",', "")),
    "attempts not a number": ('["u","bad"]', RECORD.replace('"attempts":0', '"attempts":"x"')),
    "job not an object": ('["u","bad"]', '{"message":"m-2","attempts":0,"job":"CANARY-BODY"}'),
    "not UTF-8": ('["u","bad"]', RECORD.replace("BODY", "BODY\xff").encode("latin-1")),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_record_is_reported_and_dropped_and_the_others_recovered(
    tmp_path: Path, case: str
) -> None:
    member, text = UNREADABLE[case]
    with redis_database(REDIS_DB) as r:
        ledger = Ledger(settings_for(tmp_path).ledger_url)
        ledger.migrate()
        book = IntakeBook(r)
        good = intake_member("u", "good-1")
        book.record([(good, '{"id": "good-1"}')], "m-1")  # its message was lost
        r.hset(keys.INTAKE_JOBS, member, text)
        r.zadd(keys.INTAKE_TIMES, {good: 0, member: 0})  # both long overdue
        published: list[list[dict[str, Any]]] = []
        with capture_logs() as logs:
            done = asyncio.run(
                recover_intake(
                    ledger,
                    book,
                    r,
                    lambda jobs, _message_id: published.append(jobs),
                    older_than_s=1,
                    chunk_size=10,
                )
            )
        assert published == [[{"id": "good-1"}]]
        assert (done.taken, done.republished, done.unreadable) == (1, 1, 1)
        # Dropped: no later round trips over it again.
        assert not r.hexists(keys.INTAKE_JOBS, member)
        assert r.zscore(keys.INTAKE_TIMES, member) is None
        [line] = [e for e in logs if e["event"] == "intake.unreadable"]
        named = member.decode(errors="replace") if isinstance(member, bytes) else member
        assert line["log_level"] == "error" and line["member"] == named
        assert "CANARY-BODY" not in repr(logs)
        ledger.dispose()


def test_odd_envelopes_in_the_broker_hold_no_task_and_do_not_stop_recovery(
    tmp_path: Path,
) -> None:
    # Anything a hand or another program may have pushed onto the queue, or left unacknowledged.
    odd = [
        {"headers": "x"},
        {"headers": ["id"]},
        {"headers": {}, "properties": "x"},
        {"properties": ["correlation_id"]},
        {"headers": {"id": 7}},
        "a string",
        [],
    ]
    with redis_database(REDIS_DB) as r:
        ledger = Ledger(settings_for(tmp_path).ledger_url)
        ledger.migrate()
        for envelope in odd:
            r.lpush(keys.CELERY_QUEUE, json.dumps(envelope))
        r.lpush(keys.CELERY_QUEUE, json.dumps({"headers": {"id": "m-held"}}))
        by_correlation = {"headers": None, "properties": {"correlation_id": "m-corr"}}
        r.lpush(keys.CELERY_QUEUE, json.dumps(by_correlation))
        seconds, _ = r.time()
        r.hset("unacked", "tag-odd", json.dumps([{"headers": "x"}, "", keys.CELERY_QUEUE]))
        r.zadd("unacked_index", {"tag-odd": seconds})
        assert held_message_ids(r, stale_after_s=60) == {"m-held", "m-corr"}
        book = IntakeBook(r)
        lost = intake_member("u", "lost-1")
        book.record([(lost, '{"id": "lost-1"}')], "m-1")
        r.zadd(keys.INTAKE_TIMES, {lost: 0})
        published: list[list[dict[str, Any]]] = []
        done = asyncio.run(
            recover_intake(
                ledger,
                book,
                r,
                lambda jobs, _message_id: published.append(jobs),
                older_than_s=1,
                chunk_size=10,
            )
        )
        assert published == [[{"id": "lost-1"}]] and done.republished == 1
        ledger.dispose()


def test_recovery_republishes_non_ascii_jobs_in_messages_a_worker_takes(tmp_path: Path) -> None:
    # Jobs of 150,000 漢 (450 KB of UTF-8) fit a 1 MiB cap as the client sends them; the
    # reaper wrote them as kombu's JSON (each 漢 a six-byte escape: 1.2 MB a message once
    # base64), so a worker would drop every republished message as oversize, jobs and all.
    cap = 1024 * 1024
    with redis_database(REDIS_DB) as r:
        settings = settings_for(tmp_path).model_copy(update={"max_message_bytes": cap})
        ledger = Ledger(settings.ledger_url)
        ledger.migrate()
        jobs = [decide_job(f"kanji-{i}", state={"text": "漢" * 150_000}) for i in range(3)]
        report = submitted_and_lost(r, settings, jobs, "k:replies")
        assert report.job_ids == [f"kanji-{i}" for i in range(3)]
        app = json_app(settings)
        done = asyncio.run(
            recover_intake(
                ledger,
                IntakeBook(r),
                r,
                send_jobs(app),
                older_than_s=1,
                chunk_size=10,
                max_message_bytes=cap,
            )
        )
        assert done.republished == 3
        queued = r.lrange(keys.CELERY_QUEUE, 0, -1)
        assert len(queued) == 3 and all(len(item) < cap for item in queued)
        with app.connection_for_read() as conn, conn.SimpleQueue(keys.CELERY_QUEUE) as queue:
            sent = []
            for _ in queued:
                message = queue.get(timeout=5)
                message.ack()
                sent += message.decode()[1]["jobs"]
        assert sorted(job["id"] for job in sent) == [f"kanji-{i}" for i in range(3)]
        assert all(job["state"]["text"] == "漢" * 150_000 for job in sent)
        app.close()
        ledger.dispose()


def test_a_record_whose_job_is_no_strict_json_is_republished_for_the_worker_to_reject(
    tmp_path: Path,
) -> None:
    # A hand-edited record (a NaN in its job): the reaper's strict text refused it, and the
    # round would fail on it for every record behind it.
    with redis_database(REDIS_DB) as r:
        ledger = Ledger(settings_for(tmp_path).ledger_url)
        ledger.migrate()
        book = IntakeBook(r)
        book.record([(intake_member("n", "nan-1"), '{"id": "nan-1", "x": NaN}')], "m-1")
        book.record([(intake_member("n", "ok-1"), '{"id": "ok-1"}')], "m-2")
        time.sleep(1.1)
        app = json_app(settings_for(tmp_path))
        done = asyncio.run(
            recover_intake(ledger, book, r, send_jobs(app), older_than_s=1, chunk_size=10)
        )
        assert done.republished == 2
        assert r.llen(keys.CELERY_QUEUE) == 1
        app.close()
        ledger.dispose()
