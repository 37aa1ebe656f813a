"""Envelopes pushed by hand onto the Celery queue never stop a worker (issue 16).

Anyone who can write to the broker's Redis can LPUSH any bytes onto the queue. kombu reads
each envelope in the worker's consumer loop, where nothing catches: before the guard read
them, ``42``, a text that is not JSON, a body that is not base64, headers that are a list,
a ``task`` header that is a list (in the headers or a protocol 1 body), a body that is null
(with anything else wrong: Celery's error report takes its length) each stopped the
worker with "Unrecoverable error", and a taken message went back to the queue to stop the
next one. Arguments the task cannot take (an unknown keyword, two arguments) lost their jobs
with no poison line and no metric.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from shared import keys
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.envelopes import raw_envelope, task_body
from tests.support.fleet import decide_job, profile
from tests.support.services import free_port
from worker.process.envelopes import POISON_HEADER, checked_envelope, envelope_loads
from worker.process.guard import MAX_RETRY_COUNT, malformed, unscheduled

pytestmark = pytest.mark.faults


def _bad_envelopes(stream: str) -> list[bytes]:
    good = task_body(decide_job(f"env-{uuid.uuid4().hex[:6]}", reply_to=stream))
    v1 = json.dumps({"task": ["x"], "id": "1", "args": [], "kwargs": {}}).encode()
    bomb = zlib.compress(b"[" + b" " * 20_000_000 + b"]", 9)
    patched: list[dict[str, Any]] = [
        raw_envelope(good, **{"body": "abc"}),  # not base64
        raw_envelope(good, **{"body": None}),
        raw_envelope(good, **{"body": 0}),
        raw_envelope(good, headers=[1]),
        raw_envelope(good, headers={"task": ["decisions.run_jobs"]}),
        {**raw_envelope(v1), "headers": {"lang": "py"}},  # protocol 1: the task in the body
        raw_envelope(good, properties={"body_encoding": "rot13"}),
        raw_envelope(good, properties={"delivery_tag": [1]}),
        raw_envelope(good, **{"content-type": ["application/json"]}),
        raw_envelope(bomb, headers={"compression": "application/x-gzip"}),
    ]
    return [
        b"\xff\xfe not an envelope",
        b"42",
        b"null",
        b'{"body": "W10=", "headers": {}}',
        *(json.dumps(envelope).encode() for envelope in patched),
    ]


def test_an_unreadable_envelope_becomes_a_poison_envelope() -> None:
    for raw in _bad_envelopes("s"):
        read = checked_envelope(envelope_loads(raw.decode("utf-8", "replace")))
        assert isinstance(read, dict) and POISON_HEADER in read["headers"], raw[:80]
    fine = raw_envelope(task_body(decide_job("fine", reply_to="s")))
    assert checked_envelope(envelope_loads(json.dumps(fine))) == fine
    pidbox = raw_envelope(b'{"method": "ping", "arguments": {}}', headers={"clock": 1})
    del pidbox["headers"]["task"]
    assert checked_envelope(envelope_loads(json.dumps(pidbox))) == pidbox


def test_kombus_unacked_records_read_as_they_are() -> None:
    """kombu reads its own unacked hash (``[envelope, exchange, routing_key]``) through the
    same ``loads`` to put a message back after the visibility timeout: checked as an
    envelope there, every such message was replaced by a poison envelope and never came
    back (a kill -9 lost its jobs; CI's kill-boundary tests caught it)."""
    fine = raw_envelope(task_body(decide_job("fine", reply_to="s")))
    record = [fine, "", "decisions"]
    assert envelope_loads(json.dumps(record)) == record


class _Message:
    def __init__(self, payload: Any) -> None:
        self.headers = {"id": "t"}
        self.payload = payload


def test_arguments_the_task_cannot_take_are_malformed() -> None:
    assert malformed(_Message([[], {"jobs": []}, {}])) is None
    assert malformed(_Message([[[]], {}, {}])) is None  # positional jobs
    for payload in (
        [[], {"jobz": []}, {}],
        [[], {"jobs": [], "x": 1}, {}],
        [[[]], {"jobs": []}, {}],
        [[], {}, {}],
    ):
        assert malformed(_Message(payload)) == "the task takes one argument, jobs", payload


def test_envelopes_pushed_by_hand_between_good_jobs_stop_nothing(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    port = free_port()
    # Deadlines of 15 s, not 3: what is judged is that nothing stops, not how fast the
    # worker gets through the poison on a loaded machine (a good job escalated
    # deadline_exceeded once, in CI beside other tests).
    crew = new_fleet("bad-envelopes", profile(15))
    worker = crew.start_worker(metrics_port=str(port))
    bad = _bad_envelopes(crew.stream)
    good = crew.jobs(len(bad) + 1, "between")
    for i, raw in enumerate(bad):
        crew.submit([good[i]])
        crew.broker.lpush(keys.CELERY_QUEUE, raw)
    crew.broker.lpush(
        keys.CELERY_QUEUE,
        json.dumps(raw_envelope(json.dumps([[], {"jobs": [good[-1]], "evil": 1}, {}]).encode())),
    )
    submitted = crew.submit([good[-1]])
    pairs = crew.pairs([job["id"] for job in good])
    crew.expect_replies(pairs, timeout_s=90)
    figures = report(crew.check(pairs, reap=False))
    assert all(figures.outcomes[job["id"]] == "result" for job in good), figures.outcomes
    assert submitted.job_ids == [good[-1]["id"]]
    assert worker.alive()
    log = worker.text()
    assert "Unrecoverable" not in log
    assert crew.broker.llen(keys.CELERY_QUEUE) == 0
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert f'decisions_poison_total{{reason="unreadable_envelope"}} {len(bad)}.0' in metrics
    assert 'decisions_poison_total{reason="malformed"} 1.0' in metrics


@pytest.mark.parametrize("forged", [10**12, 2**63])
def test_a_forged_retry_count_is_bounded_before_celery_computes_a_backoff_from_it(
    forged: int,
) -> None:
    # Found by an attack: Celery's next backoff is 2 ** retries (max_retries is None), so a
    # message claiming 10**12 retries would take a worker's memory on its first retry.
    headers: dict[str, Any] = {"retries": forged, "eta": None}
    assert unscheduled(headers, 900.0, 30.0) == []
    assert headers["retries"] == MAX_RETRY_COUNT
    ordinary: dict[str, Any] = {"retries": 7}
    unscheduled(ordinary, 900.0, 30.0)
    assert ordinary["retries"] == 7
