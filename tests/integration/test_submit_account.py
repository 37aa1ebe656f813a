"""What a submit tells its producer when it stops part-way, on a real Redis: every job that
went is named, whichever publish failed (``Client.submit_batch``, ``SubmitFailed``)."""

from __future__ import annotations

import json

import pytest
import redis

from shared import keys
from shared.client import Client
from shared.errors import SubmitFailed
from shared.settings import Settings
from shared.streams import Publication, RedisPublisher
from tests.support.fleet import decide_job
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 9
REPLY_TO = "account:replies"


class StreamsGone(RedisPublisher):
    """The streams Redis takes ``taken`` publishes, then drops every one (restarted under
    the producer)."""

    def __init__(self, r: redis.Redis, taken: int = 0) -> None:
        super().__init__(r, ttl_s=60)
        self.taken = taken

    def publish(self, publication: Publication) -> None:
        if self.taken <= 0:
            raise redis.ConnectionError("Connection reset by peer")
        self.taken -= 1
        super().publish(publication)


def client_losing_streams(r: redis.Redis, taken: int = 0) -> Client:
    """A client of this test's database whose streams Redis goes after ``taken`` publishes."""
    url = redis_url(REDIS_DB)
    return Client(
        Settings(_env_file=None, redis_url=url, broker_url=url), publisher=StreamsGone(r, taken)
    )


def queued_on(r: redis.Redis) -> list[str]:
    """The ids of this test's jobs with an intake record (published, or to be republished)."""
    members = [json.loads(member) for member in r.hkeys(keys.INTAKE_JOBS)]
    return sorted(job_id for stream, job_id in members if stream == REPLY_TO)


def test_a_rejection_that_cannot_be_published_says_which_jobs_went() -> None:
    """Found by an attack: the rejected message of ``bad`` raised a bare redis error, and the
    producer was not told that g1 to g4 (two messages handed to the publishing thread) went
    and g5 (still buffered) did not. g6, after the failure, was never read."""
    good = [decide_job(f"acct-g{i}") for i in range(1, 7)]
    bad = decide_job("acct-bad", questions={"q": {"type": "nope"}})
    with redis_database(REDIS_DB) as r:
        client = client_losing_streams(r)
        with pytest.raises(SubmitFailed) as failed:
            client.submit_batch([*good[:5], bad, good[5]], reply_to=REPLY_TO, chunk_size=2)
        queued = queued_on(r)
        on_queue = r.llen(keys.CELERY_QUEUE)
    assert isinstance(failed.value.__cause__, redis.ConnectionError)
    assert sorted(failed.value.queued) == queued == [f"acct-g{i}" for i in range(1, 5)]
    assert on_queue == 2
    assert failed.value.unconfirmed == [] and failed.value.unsent == ["acct-g5"]
    assert failed.value.rejected == []  # its rejected message is not on the stream


def test_a_rejected_job_without_an_id_is_apart_from_job_ids() -> None:
    """``SubmitReport.rejected`` holds job ids only; a job rejected without one is in
    ``rejected_lines`` by its position, so that no job id (``line-1``) can take its place
    (found by an attack)."""
    jobs = [
        decide_job("line-1", questions={"q": {"type": "nope"}}),
        {k: v for k, v in decide_job("x").items() if k != "id"},
        decide_job("line-2"),
    ]
    with redis_database(REDIS_DB) as r:
        url = redis_url(REDIS_DB)
        report = Client(Settings(_env_file=None, redis_url=url, broker_url=url)).submit_batch(
            jobs, reply_to=REPLY_TO
        )
        queued = queued_on(r)
    assert report.job_ids == queued == ["line-2"]
    assert list(report.rejected) == ["line-1"] and list(report.rejected_lines) == [1]
    assert [p.field for p in report.rejected_lines[1]] == ["id"]
    assert report.rejected_count == 2 and report.all_ids == ["line-2", "line-1"]


def test_every_rejection_is_counted_a_repeated_id_each_time() -> None:
    """Found by an attack: ``rejected`` keeps one entry an id, so three rejections of two
    ids (one of them beside a queued job of the same id) were reported as two."""
    jobs = [
        decide_job("dup", questions={"q": {"type": "nope"}}),
        decide_job("dup"),  # queued
        decide_job("twice", questions={"q": {"type": "nope"}}),
        {**decide_job("twice"), "batch": 7},
    ]
    with redis_database(REDIS_DB) as r:
        url = redis_url(REDIS_DB)
        client = Client(Settings(_env_file=None, redis_url=url, broker_url=url))
        report = client.submit_batch(jobs, reply_to="account:dups")
        published = r.xlen(keys.reply_stream("account:dups"))
        estimate = client.estimate(jobs, reply_to="account:dups")
    assert report.job_ids == ["dup"]
    assert published == 3
    assert report.rejected_count == 3
    assert estimate.rejected_count == 3


def test_a_failed_submit_names_the_rejections_already_on_the_stream() -> None:
    """An earlier note's noticed item: ``SubmitFailed`` named the rejected job ids, but not
    the lines rejected without an id whose message was already on the stream."""
    no_id = {k: v for k, v in decide_job("x").items() if k != "id"}
    bad = decide_job("acct-bad", questions={"q": {"type": "nope"}})
    later = decide_job("acct-later", questions={"q": {"type": "nope"}})
    with redis_database(REDIS_DB) as r:
        client = client_losing_streams(r, taken=2)
        with pytest.raises(SubmitFailed) as failed:
            client.submit_batch(
                [decide_job("acct-g1"), no_id, bad, later], reply_to=REPLY_TO, chunk_size=1
            )
        on_stream = r.xlen(keys.reply_stream(REPLY_TO))
    assert on_stream == 2
    assert failed.value.rejected_lines == [1]
    assert failed.value.rejected == ["acct-bad"]
    assert failed.value.queued == ["acct-g1"]
