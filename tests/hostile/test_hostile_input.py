"""Hostile input through the real entrances (issue 16): ``Client`` → Celery → worker, and raw
publishes straight onto the queue, on a real Redis, a SQLite ledger and the faux server.

Each hypothesis example draws a batch of hostile jobs (``tests.hostile.cases``); each job goes
once through ``Client.submit_batch`` and once inside a raw message (chunks of ten, as a
producer without the client would send them), and every batch also carries raw messages that
are not tasks at all. One worker serves every batch. For every job: exactly one terminal
message; a rejection names a field; nothing was sent for a rejected job (counted at the
faux); both paths end the same way. After every batch the worker's processes are the same
ones (none crashed, none restarted). Five examples of 100 jobs, both paths: 1,000 jobs.
"""

from __future__ import annotations

import json
import pickle
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kombu import Connection, Exchange, Producer

from shared import keys
from shared.client import Client
from shared.replies import TERMINAL_TYPES
from shared.settings import Settings
from shared.streams import read_stream
from tests.hostile.cases import Case, Hostile, cases
from tests.support.processes import decisions_env, faux_server, worker_process
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 7
BATCH = 100
CHUNK = 10


@dataclass
class Rig:
    r: redis.Redis
    client: Client
    faux_url: str
    worker: Any
    log: Path

    def pids(self) -> set[int]:
        """The worker's main process and its pool (its process group)."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.worker.pid and fields[0] != "Z":
                pids.add(int(stat.parent.name))
        return pids


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    logs = tmp_path_factory.mktemp("hostile")
    url = redis_url(REDIS_DB)
    with redis_database(REDIS_DB) as r, faux_server(log=logs / "faux.log") as faux_url:
        env = decisions_env(
            broker_url=url,
            redis_url=url,
            ledger_url=f"sqlite:///{logs / 'ledger.db'}",
            faux_url=faux_url,
            worker_pool="prefork",  # pool processes: this test is about them
            worker_concurrency="2",
            reaper_interval_s="0",
        )
        log = logs / "worker.log"
        with worker_process(env, "--migrate", log=log) as worker:
            client = Client(Settings(broker_url=url, redis_url=url), redis_client=r)
            rig = Rig(r, client, faux_url, worker, log)
            until = time.monotonic() + 30
            while len(rig.pids()) < 3 and time.monotonic() < until:  # the pool is up
                time.sleep(0.1)
            yield rig
            client.close()


def _task_headers() -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {
        "lang": "py",
        "task": keys.RUN_JOBS_TASK,
        "id": task_id,
        "root_id": task_id,
        "retries": 0,
    }


def _not_tasks() -> list[tuple[bytes, str, dict[str, Any]]]:
    """Raw messages that are no task at all: each must be dropped, the worker unharmed."""
    deep = "[" * 700 + "]" * 700
    return [
        (b"\x00\xff not json", "application/json", _task_headers()),
        (b'{"not": "a task"}', "application/json", _task_headers()),
        (f"[{deep}, {{}}, {{}}]".encode(), "application/json", _task_headers()),
        (
            b'[[], {"jobs": []}, {}]',
            "application/json",
            {**_task_headers(), "kwargsrepr": json.loads(deep)},
        ),
        (pickle.dumps(((), {"jobs": []}, {})), "application/x-python-serialize", _task_headers()),
        (
            b'[[], {"jobs": [' + b"[" * 3_000 + b"]" * 3_000 + b"]}, {}]",
            "application/json",
            _task_headers(),
        ),
    ]


def _publish_raw(rig: Rig, raw: list[Hostile]) -> None:
    exchange = Exchange(keys.CELERY_QUEUE, type="direct")
    messages: list[tuple[bytes, str, dict[str, Any]]] = []
    chunk = [h.text for h in raw if h.text is not None and not h.alone]
    for i in range(0, len(chunk), CHUNK):
        jobs = b", ".join(t for t in chunk[i : i + CHUNK] if t is not None)
        messages.append(
            (b'[[], {"jobs": [' + jobs + b"]}, {}]", "application/json", _task_headers())
        )
    for h in raw:
        if h.alone and h.text is not None:
            messages.append(
                (b'[[], {"jobs": [' + h.text + b"]}, {}]", "application/json", _task_headers())
            )
    messages += _not_tasks()
    with Connection(rig.client.settings.broker_url) as conn:
        producer = Producer(conn)
        for body, content_type, headers in messages:
            producer.publish(
                body,
                exchange=exchange,
                routing_key=keys.CELERY_QUEUE,
                declare=[exchange],
                content_type=content_type,
                content_encoding="utf-8",
                headers=headers,
                serializer=None,
            )


def _terminal(rig: Rig, stream: str, wanted: set[str], unnamed: int) -> dict[str, list[Any]]:
    """Every terminal message on ``stream`` by job id, once ``wanted`` (and ``unnamed`` more,
    rejections of unreadable text) have theirs; at most 60 s."""
    until = time.monotonic() + 60
    while True:
        by_job: dict[str, list[Any]] = {}
        for entry in read_stream(rig.r, stream):
            if entry is not None and entry.type in TERMINAL_TYPES:
                by_job.setdefault(entry.job_id, []).append(json.loads(entry.message))
        extra = len(set(by_job) - wanted)
        if (wanted <= set(by_job) and extra >= unnamed) or time.monotonic() > until:
            return by_job
        time.sleep(0.2)


def _check_rejection(job_id: str, message: dict[str, Any], calls: dict[str, int]) -> None:
    problems = message["problems"]
    assert problems and all(p["field"] for p in problems), (job_id, problems)
    assert not any(key.startswith(f"{job_id}/") for key in calls), f"{job_id} was sent"


@settings(
    max_examples=5,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),  # a failing batch is reported, not shrunk
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(drawn=st.lists(cases(), min_size=BATCH, max_size=BATCH))
def test_hostile_jobs_are_answered_or_rejected_and_nothing_dies(
    rig: Rig, drawn: list[Case]
) -> None:
    pids = rig.pids()
    stream = f"hostile:{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:6]
    via_client = [c.build(f"h-{tag}-{i:03d}-c", stream) for i, c in enumerate(drawn)]
    via_raw = [c.build(f"h-{tag}-{i:03d}-r", stream) for i, c in enumerate(drawn)]

    report = rig.client.submit_batch([h.value for h in via_client], reply_to=stream, chunk_size=7)
    _publish_raw(rig, via_raw)

    # Text that does not read has no id a reply can carry: its rejection is "invalid-...".
    unreadable = [h for h in via_client if isinstance(h.value, bytes)]
    named = [h for h in via_client if not isinstance(h.value, bytes)]
    named += [h for h in via_raw if h.text is not None and not h.alone]
    replies = _terminal(rig, stream, {h.job_id for h in named}, len(unreadable))
    calls = dict(httpx.get(f"{rig.faux_url}/_faux/calls", timeout=10).json())

    missing = sorted((h.job_id, h.category) for h in named if h.job_id not in replies)
    assert not missing, f"{len(missing)} job(s) lost: {missing[:5]}"
    outcome: dict[str, str] = {}
    for h in named:
        [message] = replies[h.job_id]  # exactly one terminal message
        outcome[h.job_id] = message["type"]
        if message["type"] == "rejected":
            _check_rejection(h.job_id, message, calls)
        if h.expect == "rejected":
            assert message["type"] == "rejected", (h.category, h.job_id, message)
        elif h.expect == "answered":
            assert message["type"] in ("result", "escalation"), (h.category, message)
    for c, r in zip(via_client, via_raw, strict=True):
        if c.job_id in outcome and r.job_id in outcome:
            same = (outcome[c.job_id] == "rejected") == (outcome[r.job_id] == "rejected")
            assert same, (c.category, outcome[c.job_id], outcome[r.job_id])
    invalid = [m for j, ms in replies.items() if j.startswith("invalid-") for m in ms]
    assert len(invalid) >= len(unreadable)
    assert all(m["problems"][0]["field"] == "(body)" for m in invalid)
    assert report.rejected_count + len(report.job_ids) == BATCH
    # Raw text that breaks a whole message: dropped, and never answered.
    for h in via_raw:
        if h.alone:
            assert h.job_id not in replies
    counts = Counter(h.category.split("-")[0] for h in via_client)
    assert rig.worker.poll() is None, "the worker exited"
    assert rig.pids() == pids, f"a worker process restarted (batch: {dict(counts)})"
    log = rig.log.read_text(errors="replace")
    assert "RecursionError" not in log and "Unrecoverable error" not in log
