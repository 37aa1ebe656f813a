"""The producer's side of ``DECISIONS_MAX_MESSAGE_BYTES``: ``Client`` never builds a message a
worker would drop unread (chunks bounded by bytes as well as by count, plain and packed), a job
too big for a message of its own is rejected naming the setting, and a cap too small for one
job of ``DECISIONS_MAX_JOB_BYTES`` is a settings error of one line.

Messages are read back from kombu's memory transport, whose envelope is the Redis
transport's (both are kombu's virtual transport): each is measured as the Redis transport
pushes it (kombu's JSON of the envelope, the body base64 in it)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from queue import Empty
from typing import Any

import pydantic
import pytest
from celery import Celery
from kombu.utils import json as kombu_json

from shared import keys
from shared.client import Client
from shared.message_size import MessageChunks, one_job_message_bytes
from shared.settings import Settings
from shared.streams import Publication
from worker.cli.errors import explain

#: A cap small enough for a few jobs of tens of KB a message.
CAP = 256 * 1024
#: The job limit under it: one job of this size fits a message of CAP.
JOB_BYTES = 150_000


def settings(**over: Any) -> Settings:
    return Settings(max_message_bytes=CAP, max_job_bytes=JOB_BYTES, **over)


def job(job_id: str, body: str, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": job_id,
        "kind": "decide",
        "batch": "cap",
        "state": {"body": body},
        "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
        "timeout_s": 60,
    }
    base.update(over)
    return base


class Published:
    """A reply publisher that keeps what it is given (the rejections)."""

    def __init__(self) -> None:
        self.items: list[Publication] = []

    def publish(self, item: Publication) -> bool:
        self.items.append(item)
        return True


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("cap", broker="memory://", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    _queued(app)  # the memory transport's queues are the process's: start empty
    yield app
    _queued(app)


def _queued(app: Celery) -> list[dict[str, Any]]:
    """Every envelope on the task queue, taken off it, oldest first."""
    envelopes = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while True:
            try:
                envelopes.append(channel._get(keys.CELERY_QUEUE))
            except Empty:
                return envelopes


def _sent(app: Celery) -> list[tuple[int, list[str]]]:
    """Each message on the queue: (its bytes as the Redis transport pushes it, its job ids)."""
    sent = []
    for envelope in _queued(app):
        size = len(kombu_json.dumps(envelope).encode())
        _args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        sent.append((size, [j["id"] for j in kwargs["jobs"]]))
    return sent


def _bodies(n: int) -> list[str]:
    # ASCII text, and text of two bytes a character in UTF-8.
    return ["x" * 40_000 if i % 2 else "é" * 10_000 for i in range(n)]


def test_a_batch_goes_in_messages_under_the_cap_each_job_once_in_order(app: Celery) -> None:
    jobs = [job(f"j{i:02d}", body) for i, body in enumerate(_bodies(30))]
    client = Client(settings(), celery_app=app, publisher=Published())
    report = client.submit_batch(jobs, reply_to="claims")
    assert not report.rejected and report.job_ids == [j["id"] for j in jobs]
    sent = _sent(app)
    assert len(sent) == report.messages > 1
    assert all(size <= CAP for size, _ in sent), [size for size, _ in sent]
    assert [job_id for _, ids in sent for job_id in ids] == report.job_ids
    # Bounded by bytes, not one job a message: a message holds what fits.
    assert max(len(ids) for _, ids in sent) > 1
    assert min(size for size, _ in sent[:-1]) > CAP // 2
    # Small jobs: the count bounds a message, as before.
    small = [job(f"s{i}", "small") for i in range(7)]
    client.submit_batch(small, reply_to="claims", chunk_size=3)
    assert [ids for _, ids in _sent(app)] == [["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s6"]]


def test_packed_messages_are_under_the_cap_too(app: Celery) -> None:
    state = "y" * 40_000  # every job of a pack carries the shared state
    jobs = [job(f"p{i:02d}", state) for i in range(12)]
    report = Client(settings(), celery_app=app).submit_batch(jobs, reply_to="claims", pack=True)
    sent = _sent(app)
    assert len(sent) == report.messages > 1
    assert all(size <= CAP for size, _ in sent)
    assert [job_id for _, ids in sent for job_id in ids] == [j["id"] for j in jobs]


def test_a_job_within_the_job_limit_goes_in_a_message_under_the_cap_however_written(
    app: Celery,
) -> None:
    # 60,000 "я" are 120,000 bytes of UTF-8, within DECISIONS_MAX_JOB_BYTES. The wire text
    # used to escape them (360,000 bytes, 480,000 base64) and the job was refused for a
    # message's size; it now goes as the compact UTF-8 the job limit measured.
    big = job("big", "я" * 60_000)
    client = Client(settings(), celery_app=app, publisher=Published())
    report = client.submit_batch([job("a", "fine"), big, job("b", "fine")], reply_to="claims")
    assert report.job_ids == ["a", "big", "b"] and not report.rejected
    sent = _sent(app)
    assert [job_id for _, ids in sent for job_id in ids] == ["a", "big", "b"]
    assert all(size <= CAP for size, _ in sent)
    estimate = client.estimate([big, job("c", "fine")], reply_to="claims", store=False)
    assert not estimate.rejected


def test_a_job_with_the_largest_state_fits_a_message_of_the_default_cap(app: Celery) -> None:
    defaults = Settings()
    filler = "z" * (defaults.max_state_bytes - 100)
    client = Client(defaults, celery_app=app)
    report = client.submit_batch([job("limit", filler)], reply_to="claims")
    assert report.job_ids == ["limit"], report.rejected
    [(size, ids)] = _sent(app)
    assert ids == ["limit"] and size <= defaults.max_message_bytes


def test_a_job_of_the_job_limit_as_sent_fits_a_message_of_the_smallest_cap(app: Celery) -> None:
    smallest = Settings(max_job_bytes=JOB_BYTES, max_message_bytes=one_job_message_bytes(JOB_BYTES))
    # Stamped already, so that its text as sent is its compact JSON: JOB_BYTES exactly.
    stamps = {"reply_to": "claims", "submitted_at": datetime.now(UTC).isoformat()}
    filler = "z" * (JOB_BYTES - len(_compact(job("limit", "", **stamps))))
    client = Client(smallest, celery_app=app, publisher=Published())
    report = client.submit_batch([job("limit", filler, **stamps)])
    assert report.job_ids == ["limit"], report.rejected
    [(size, _)] = _sent(app)
    assert size <= smallest.max_message_bytes
    # A byte more is over the job limit, which names its own setting.
    report = client.submit_batch([job("limit", filler + "z", **stamps)])
    assert "DECISIONS_MAX_JOB_BYTES" in report.rejected["limit"][0].message


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_chunks_keep_each_keys_place_and_start_over_after_a_full_message() -> None:
    overhead = one_job_message_bytes(0) - 4  # a message with no job's bytes
    chunks: MessageChunks[str] = MessageChunks(count=3, max_bytes=overhead + 100)
    assert chunks.add("a", "a1", 60) == []
    assert chunks.add("b", "b1", 10) == []
    assert chunks.add("a", "a2", 60) == [["a1"]]  # a2 does not fit with a1
    assert chunks.add("b", "b2", 10) == []
    assert chunks.add("b", "b3", 10) == [["b1", "b2", "b3"]]  # full by count
    assert chunks.add("b", "b4", 10) == []
    assert list(chunks.drain()) == [["a2"], ["b4"]]


def test_a_cap_too_small_for_one_job_is_a_settings_error_naming_both_and_the_fix() -> None:
    needed = one_job_message_bytes(Settings().max_job_bytes)
    assert Settings(max_message_bytes=needed).max_message_bytes == needed
    with pytest.raises(pydantic.ValidationError) as caught:
        Settings(max_message_bytes=needed - 1)
    said = explain(caught.value)
    assert "DECISIONS_MAX_MESSAGE_BYTES=" in said.problem
    assert "DECISIONS_MAX_JOB_BYTES=" in said.problem
    assert f"at least {needed}" in said.problem
    assert "\n" not in said.problem and "Traceback" not in said.problem
    assert said.exit_code == 2
    # Lowering the job limit is the other fix.
    assert Settings(max_message_bytes=2**20, max_job_bytes=700_000).max_message_bytes == 2**20


def test_the_settings_error_comes_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECISIONS_MAX_MESSAGE_BYTES", "1048576")
    with pytest.raises(pydantic.ValidationError) as caught:
        Settings()
    assert "DECISIONS_MAX_MESSAGE_BYTES=1048576 is too small" in explain(caught.value).problem
