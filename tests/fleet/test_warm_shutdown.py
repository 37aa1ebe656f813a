"""SIGTERM in the middle of a batch, as Kubernetes and ``docker stop`` deliver it (to the main
process only): the calls in flight finish and are recorded, nothing new starts, the messages
not started stay with the broker, and the next worker finishes the batch without asking any
call twice."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from shared.client import Client
from shared.settings import Settings
from shared.streams import read_stream
from tests.fleet.support import flushed, patch_faux, worker
from tests.support.checker import check
from tests.support.fleet import decide_job, wait_until
from tests.support.ownservers import OwnRedis
from tests.support.processes import decisions_env, faux_server
from tests.support.services import free_port, postgres_schema
from worker.app import create_app
from worker.ledger import Ledger
from worker.observability.metrics import ledger_gauges, queue_depth

pytestmark = pytest.mark.integration

#: Long enough that SIGTERM surely lands while both requests are in flight.
LATENCY_MS = 3000
#: What the test allows the shutdown; the deployment's grace period is far longer.
GRACE_S = 30


def test_sigterm_finishes_the_calls_in_flight_and_leaves_the_rest_queued(
    tmp_path: Path, redis_server: OwnRedis
) -> None:
    with (
        flushed(redis_server) as (r, url),
        postgres_schema("shutdown") as ledger_url,
        faux_server(log=tmp_path / "faux.log") as faux_url,
    ):
        with Ledger(ledger_url) as ledger:
            ledger.migrate()
        port = free_port()
        env = decisions_env(
            broker_url=url,
            redis_url=url,
            ledger_url=ledger_url,
            faux_url=faux_url,
            worker_pool="prefork",  # pool processes: this test is about them
            worker_concurrency="2",
            metrics_port=str(port),
            metrics_addr="127.0.0.1",
        )
        settings = Settings(broker_url=url, redis_url=url, ledger_url=ledger_url)
        jobs = [decide_job(f"shutdown-{i}") for i in range(6)]
        patch_faux(faux_url, {"latency_ms": LATENCY_MS})
        ledger = Ledger(ledger_url)
        with worker(env, tmp_path / "first.log") as first:
            report = Client(settings, redis_client=r).submit_batch(
                jobs, reply_to="shutdown", chunk_size=1
            )
            wait_until(lambda: ledger_gauges(ledger).in_flight == 2, 20, "two calls in flight")
            in_flight = {
                job["id"]
                for job in jobs
                if (call := ledger.get_call(job["id"], "decide")) and call.status == "claimed"
            }
            assert len(in_flight) == 2

            first.send_signal(signal.SIGTERM)
            stopped_at = time.monotonic()
            base = f"http://127.0.0.1:{port}"
            # Warm shutdown: no longer ready (a rollout moves on), still alive (not killed).
            wait_until(
                lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 503,
                5,
                "/readyz answering 503 after SIGTERM",
            )
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
            assert first.wait(timeout=GRACE_S) == 0
            took = time.monotonic() - stopped_at
        assert took < GRACE_S

        # The two calls in flight at SIGTERM were answered, recorded and published.
        for job_id in in_flight:
            call = ledger.get_call(job_id, "decide")
            assert call is not None and call.status == "answered"
        published = {e.job_id for e in read_stream(r, "shutdown")}
        assert published == in_flight
        # Nothing else started, and the broker still holds every message not started.
        not_started = set(report.job_ids) - in_flight
        assert all(ledger.get_job(job_id) is None for job_id in not_started)
        depth = queue_depth(create_app(settings))
        assert (depth.ready, depth.unacked) == (len(not_started), 0)

        patch_faux(faux_url, {"latency_ms": 0})
        with worker(env, tmp_path / "second.log"):
            pairs = [(job_id, "shutdown") for job_id in report.job_ids]
            client = Client(settings, redis_client=r)
            replies = list(client.replies("shutdown", job_ids=report.job_ids, timeout_s=60))
            assert sorted(m.job_id for m in replies) == sorted(report.job_ids)
            figures = check(pairs, r=r, faux_url=faux_url, ledger_url=ledger_url, reap=None)
        ledger.dispose()
        assert figures.results == 6
        assert figures.requests == 6  # one request per job: none was asked again
        assert figures.duplicates == 0 and figures.lost == 0
