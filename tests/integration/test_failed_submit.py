"""A submit whose publish fails, on a real Redis (``shared.chunk_publisher.MessageSender``):
the producer is told which jobs were queued, and the intake records of the others are gone,
so that no reaper runs, minutes later, jobs the producer was told failed. The broker's side
is faked only on the wire: nothing listens on its port, kombu's ``Producer.publish`` raises,
or the server is killed mid-way."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kombu.exceptions
import pytest
import redis
from kombu.messaging import Producer

from shared import keys
from shared.client import Client
from shared.errors import SubmitFailed
from shared.intake import IntakeBook, intake_member, member_job_id
from shared.settings import Settings
from tests.support.fleet import decide_job
from tests.support.ownservers import own_redis
from tests.support.services import free_port, redis_database, redis_url
from worker.ledger import Ledger
from worker.recovery.intake import IntakeRound, recover_intake

pytestmark = pytest.mark.integration

REDIS_DB = 4  # this folder's intake tests' database
STREAM = "fs:replies"


def settings_for(tmp_path: Path, broker_url: str, streams_url: str | None = None) -> Settings:
    return Settings(
        _env_file=None,
        broker_url=broker_url,
        redis_url=streams_url or broker_url,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
    )


def recovery_round(settings: Settings, r: redis.Redis, broker: redis.Redis) -> IntakeRound:
    """A reaper's round once every record is past its 1 s grace: what it would republish."""
    ledger = Ledger(settings.ledger_url)
    ledger.migrate()
    time.sleep(1.1)
    try:
        return asyncio.run(
            recover_intake(
                ledger,
                IntakeBook(r),
                broker,
                lambda jobs, _message_id: None,
                older_than_s=1,
                chunk_size=10,
            )
        )
    finally:
        ledger.dispose()


def recorded(r: redis.Redis) -> list[str]:
    """The job ids with an intake record, sorted."""
    members = [m.decode() for m in r.hkeys(keys.INTAKE_JOBS)]
    assert sorted(m.encode() for m in members) == sorted(r.zrange(keys.INTAKE_TIMES, 0, -1))
    return sorted(member_job_id(m) for m in members)


def publish_failing(
    monkeypatch: pytest.MonkeyPatch, at: int, fail: Callable[[Callable[[], Any]], Any]
) -> list[int]:
    """kombu's publish, the ``at``-th (1-based) going through ``fail`` with the real publish."""
    real = Producer.publish
    calls: list[int] = []

    def publish(self: Producer, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(calls) + 1)
        if len(calls) == at:
            return fail(lambda: real(self, *args, **kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Producer, "publish", publish)
    return calls


def refused(_publish: Callable[[], Any]) -> Any:
    raise kombu.exceptions.OperationalError("Error 104 while writing to socket. Reset by peer.")


def lost_reply(publish: Callable[[], Any]) -> Any:
    publish()  # the broker has it; the reply never came back
    raise kombu.exceptions.OperationalError("Timeout reading from socket")


def test_a_broker_nobody_listens_on_leaves_no_intake_record_to_republish(
    tmp_path: Path,
) -> None:
    with redis_database(REDIS_DB) as r:
        settings = settings_for(
            tmp_path, f"redis://127.0.0.1:{free_port()}/0", streams_url=redis_url(REDIS_DB)
        )
        client = Client(settings, redis_client=r)
        jobs = [decide_job(f"fs-{i}") for i in range(5)]
        with pytest.raises(Exception) as caught:
            client.submit_batch(jobs, reply_to=STREAM, chunk_size=2)
        # Before: the first message's two records stayed, and a reaper republished them.
        assert r.hlen(keys.INTAKE_JOBS) == 0 and r.zcard(keys.INTAKE_TIMES) == 0
        assert recovery_round(settings, r, r).republished == 0
        failed = caught.value
        assert isinstance(failed, SubmitFailed)
        assert isinstance(failed.__cause__, kombu.exceptions.OperationalError)
        assert failed.queued == []
        assert failed.not_queued == [f"fs-{i}" for i in range(5)]
        assert failed.unconfirmed == ["fs-0", "fs-1"] and failed.unsent == ["fs-2", "fs-3", "fs-4"]


def test_a_broker_failing_on_the_third_message_keeps_the_records_of_the_first_two_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with redis_database(REDIS_DB) as r:
        settings = settings_for(tmp_path, redis_url(REDIS_DB))
        client = Client(settings, redis_client=r)
        jobs = [decide_job(f"fs-{i}") for i in range(8)]
        calls = publish_failing(monkeypatch, 3, refused)
        with pytest.raises(Exception) as caught:
            client.submit_batch(jobs, reply_to=STREAM, chunk_size=2)  # four messages
        assert calls == [1, 2, 3]  # nothing after the failed one was handed to the broker
        assert r.llen(keys.CELERY_QUEUE) == 2
        # Before: fs-4's and fs-5's records stayed too, for a reaper to republish.
        assert recorded(r) == ["fs-0", "fs-1", "fs-2", "fs-3"]
        failed = caught.value
        assert isinstance(failed, SubmitFailed), failed
        assert failed.queued == ["fs-0", "fs-1", "fs-2", "fs-3"]
        assert failed.unconfirmed == ["fs-4", "fs-5"] and failed.unsent == ["fs-6", "fs-7"]
        assert "4 job(s) were queued" in str(failed)
        # The queued ones are still recovered as ever: one lost in a pop window comes back.
        r.rpop(keys.CELERY_QUEUE)
        done = recovery_round(settings, r, r)
        assert (done.held, done.republished) == (2, 2)


def test_a_publish_that_reached_the_broker_but_raised_is_unconfirmed_and_never_republished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ambiguous case: the broker took the second message, its reply was lost. The
    # producer is told those jobs are unconfirmed (they may run, once, from that message);
    # their records are withdrawn, so no reaper adds a run the producer was told failed.
    with redis_database(REDIS_DB) as r:
        settings = settings_for(tmp_path, redis_url(REDIS_DB))
        client = Client(settings, redis_client=r)
        publish_failing(monkeypatch, 2, lost_reply)
        with pytest.raises(Exception) as caught:
            client.submit_batch(
                [decide_job(f"fs-{i}") for i in range(4)], reply_to=STREAM, chunk_size=2
            )
        assert r.llen(keys.CELERY_QUEUE) == 2  # both messages are on the queue
        assert recorded(r) == ["fs-0", "fs-1"]
        failed = caught.value
        assert isinstance(failed, SubmitFailed), failed
        assert (failed.queued, failed.unconfirmed, failed.unsent) == (
            ["fs-0", "fs-1"],
            ["fs-2", "fs-3"],
            [],
        )
        r.delete(keys.CELERY_QUEUE)  # both lost by the broker: only the queued come back
        assert recovery_round(settings, r, r).republished == 2


def test_a_record_a_reaper_already_repointed_is_not_withdrawn(tmp_path: Path) -> None:
    with redis_database(REDIS_DB) as r:
        book = IntakeBook(r)
        members = [intake_member(STREAM, "fs-0"), intake_member(STREAM, "fs-1")]
        book.record([(m, '{"id": "x"}') for m in members], "m-failed")
        [first, *_] = sorted(book.take(older_than_s=-1, limit=10), key=lambda rec: rec.member)
        book.rewrite(first, "m-reaper")  # fs-0 is in a reaper's message now
        assert book.withdraw(members, "m-failed") == 1
        assert recorded(r) == ["fs-0"]


def test_an_intake_redis_down_too_is_logged_and_the_broker_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One Redis for the broker and the records, killed during the second publish.
    with own_redis() as server:
        settings = settings_for(tmp_path, server.url(0))
        r = redis.Redis.from_url(server.url(0))
        client = Client(settings, redis_client=r)

        def killed(publish: Callable[[], Any]) -> Any:
            server.kill()
            return publish()

        publish_failing(monkeypatch, 2, killed)
        with caplog.at_level(logging.WARNING), pytest.raises(SubmitFailed) as caught:
            client.submit_batch(
                [decide_job(f"fs-{i}") for i in range(4)], reply_to=STREAM, chunk_size=2
            )
        assert isinstance(caught.value.__cause__, kombu.exceptions.OperationalError)
        assert caught.value.queued == ["fs-0", "fs-1"]
        assert caught.value.unconfirmed == ["fs-2", "fs-3"]
        assert "could not withdraw the records of 2 job(s)" in caplog.text
        server.start()  # its data kept: the records the producer could not withdraw
        assert recorded(r) == ["fs-0", "fs-1", "fs-2", "fs-3"]
        r.close()
