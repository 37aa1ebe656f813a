"""A message over ``DECISIONS_MAX_MESSAGE_BYTES`` pushed onto the queue stops nothing.

Nothing bounded a message before it was decoded: a 300 MB one, read whole by kombu's BRPOP,
decoded to text, parsed, base64-decoded and parsed again, took a worker to 2 GB. Under a
memory limit that is an OOM kill, and the message, back from kombu's unacked hash, killed
the next worker. Here a worker capped at 1 MiB is handed a 3 MiB envelope of valid jobs
(each within the job limits, so only the message's size can stop them) between good jobs:
it drops it unread (``task.poison``, reason ``oversize_message``) and answers the rest.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from shared import keys
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.envelopes import raw_envelope, task_body
from tests.support.fleet import decide_job, profile, wait_until
from tests.support.services import free_port

pytestmark = pytest.mark.faults

CAP = 2**20
#: Under the cap's job limit (one job of it must fit a message of CAP), so that every job
#: of the oversize message passes the job checks: only its size can keep it out.
JOB_BYTES = 512 * 1024
STATE_BYTES = 300_000


def _oversize_envelope(jobs: list[dict[str, Any]]) -> bytes:
    """A Redis transport envelope as a producer of Celery's would push it."""
    return json.dumps(raw_envelope(task_body(*jobs))).encode()


def test_an_oversize_message_between_good_jobs_is_dropped_unread(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    port = free_port()
    crew = new_fleet(
        "oversize",
        profile(3, max_message_bytes=str(CAP), max_job_bytes=str(JOB_BYTES)),
    )
    worker = crew.start_worker(metrics_port=str(port))
    pid = worker.pid
    secret = f"secret-{uuid.uuid4().hex}"
    big_jobs = [
        decide_job(
            f"{crew.name}-big-{i}",
            reply_to=crew.stream,
            state={"body": (secret + " ") * (STATE_BYTES // (len(secret) + 1))},
        )
        for i in range(8)
    ]
    oversize = _oversize_envelope(big_jobs)
    assert len(oversize) > 3 * CAP

    good = crew.jobs(4, "around")
    crew.submit(good[:2])
    crew.broker.lpush(keys.CELERY_QUEUE, oversize)
    crew.submit(good[2:])
    pairs = crew.pairs([job["id"] for job in good])
    crew.expect_replies(pairs, timeout_s=90)
    figures = report(crew.check(pairs, reap=False))
    assert all(figures.outcomes[job["id"]] == "result" for job in good), figures.outcomes

    # The same worker process, never restarted, never stopped.
    assert worker.alive() and worker.pid == pid
    log = worker.text()
    assert "Unrecoverable" not in log and log.count("worker.ready") == 1, log[-3000:]
    # Gone: from the queue, and from kombu's unacked hash once the good jobs are acked.
    assert crew.broker.llen(keys.CELERY_QUEUE) == 0
    wait_until(lambda: crew.broker.hlen("unacked") == 0, 30, "kombu's unacked hash emptied")
    # Its jobs never ran: dropped whole, not refused job by job.
    replied = {entry.job_id for entry in crew.entries()}
    assert not replied & {job["id"] for job in big_jobs}

    poison = [line for line in log.splitlines() if "task.poison" in line]
    assert len(poison) == 1, poison
    assert f'"process": {pid}' in poison[0]  # dropped by the worker's main process itself
    setting = "DECISIONS_MAX_MESSAGE_BYTES"
    for said in ("oversize_message", f"{len(oversize)} bytes", f"at most {CAP} ({setting})"):
        assert said in poison[0], (said, poison[0])
    assert secret not in log
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'decisions_poison_total{reason="oversize_message"} 1.0' in metrics
