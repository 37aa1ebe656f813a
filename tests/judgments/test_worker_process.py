"""Sift, route and verify on real parts: a Redis broker and streams (database 11), a
PostgreSQL ledger (a schema of its own), a `decisions worker` process and a `decisions faux
serve` process counting every request by call key; the counts are the packing the limits
allow, and the batch's stored estimate matches what the ledger says was sent."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.client import Client
from shared.replies import ResultMessage
from shared.settings import Settings
from tests.judgments.support import (
    BATCH,
    PARALLEL_TEST_KEY,
    REPLY_TO,
    requests_for,
    route_job,
    sift_job,
    verified_job,
)
from tests.support.processes import DECISIONS, decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 11


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("judgments-fleet")
    with (
        redis_database(REDIS_DB) as r,
        postgres_schema("judgments") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            parallel_base_url=faux_url,
        )
        env["PARALLEL_API_KEY"] = PARALLEL_TEST_KEY
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                _env_file=None,
                broker_url=redis_url(REDIS_DB),
                redis_url=redis_url(REDIS_DB),
                ledger_url=ledger_url,
                faux_url=faux_url,
                parallel_base_url=faux_url,
            )
            yield {
                "redis": r, "faux": faux_url, "env": env, "settings": settings,
                "log": logs / "worker.log",
            }


def test_judgments_through_a_worker_process(fleet: dict[str, Any]) -> None:
    settings: Settings = fleet["settings"]
    jobs = [
        sift_job("w-parallel", [f"message {i}" for i in range(250)], provider="parallel"),
        sift_job("w-small", ["buy now!!!", "lunch at 1?", "you won a prize"]),
        route_job("w-route"),
        verified_job("w-verify", "Ticket: payouts failing", model="typesafe/jev-1.14",
                     stakes="high"),
    ]
    client = Client(settings)
    estimate = client.estimate(jobs, reply_to=REPLY_TO)
    assert estimate.total.requests == 3 + 1 + 1 + 3
    report = client.submit_batch(jobs, reply_to=REPLY_TO, chunk_size=2)
    assert sorted(report.job_ids) == sorted(j["id"] for j in jobs)
    got = {r.job_id: r for r in client.replies(REPLY_TO, job_ids=report.job_ids, timeout_s=120)}
    assert set(got) == set(report.job_ids)

    calls = dict(httpx.get(f"{fleet['faux']}/_faux/calls", timeout=5).json())
    assert calls == {
        **{f"w-parallel/sift.{k}": 1 for k in range(requests_for(250, 100))},
        "w-small/sift.0": 1,
        "w-route/route": 1,
        "w-verify/decide": 1, "w-verify/verify.0": 1, "w-verify/verify.1": 1,
    }
    parallel = got["w-parallel"]
    assert isinstance(parallel, ResultMessage) and parallel.items is not None
    assert len(parallel.items) == 250 and all(i.status == "decided" for i in parallel.items)
    assert got["w-route"].type == "result"

    status = subprocess.run(
        [DECISIONS, "ledger", "status", "--batch", BATCH, "--json"],
        env=fleet["env"], capture_output=True, text=True, timeout=60,
    )
    assert status.returncode == 0, status.stderr
    figures = json.loads(status.stdout)
    assert figures["requests_sent"] == figures["estimate"]["requests"] == sum(calls.values())

    # Submitted again: every job replays from the ledger (the worker says so); nothing
    # reaches the faux.
    client.submit_batch(jobs, reply_to=REPLY_TO)
    wait_replayed(fleet["log"], [j["id"] for j in jobs])
    assert dict(httpx.get(f"{fleet['faux']}/_faux/calls", timeout=5).json()) == calls


def wait_replayed(log: Path, job_ids: list[str], timeout_s: float = 60) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        lines = [line for line in log.read_text(errors="replace").splitlines()
                 if "job.replayed" in line]
        if all(any(job_id in line for line in lines) for job_id in job_ids):
            return
        time.sleep(0.1)
    raise TimeoutError(f"not every job was replayed: {job_ids}")


def test_a_packed_batch_through_a_worker_process(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    settings: Settings = fleet["settings"]
    batch = "packs-worker"
    state = "Store policy: refunds within 30 days of delivery."
    jobs = [
        {
            "id": f"wp-{i:03d}",
            "batch": batch,
            "provider": "parallel",
            "state": state,
            "questions": {
                f"q{k}": {"type": "noul", "instructions": f"Order {i}, clause {k}: refund?"}
                for k in range(3)
            },
        }
        for i in range(120)
    ]
    lines = tmp_path / "packed.jsonl"
    lines.write_text("\n".join(json.dumps(j) for j in jobs) + "\n")
    dry = subprocess.run(
        [DECISIONS, "submit", str(lines), "--reply-to", REPLY_TO, "--dry-run", "--json",
         "--pack"],
        env=fleet["env"], capture_output=True, text=True, timeout=120,
    )
    assert dry.returncode == 0, dry.stderr
    # One message of 100 jobs (33 + 33 + 33 + 1) and one of 20, 33 jobs a Parallel request.
    assert json.loads(dry.stdout)["total"]["requests"] == 4 + 1
    before = dict(httpx.get(f"{fleet['faux']}/_faux/calls", timeout=5).json())

    submitted = subprocess.run(
        [DECISIONS, "submit", str(lines), "--reply-to", REPLY_TO, "--pack", "--wait",
         "--timeout", "120"],
        env=fleet["env"], capture_output=True, text=True, timeout=180,
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "in 2 message(s)" in " ".join(submitted.stdout.split())

    after = dict(httpx.get(f"{fleet['faux']}/_faux/calls", timeout=5).json())
    new = {k: v for k, v in after.items() if before.get(k) != v}
    assert sum(new.values()) == 5 and all(v == 1 for v in new.values())
    assert sum(1 for k in new if k.startswith("pack:")) == 4
    client = Client(settings)
    got = {r.job_id: r for r in client.replies(REPLY_TO, job_ids=[j["id"] for j in jobs],
                                               timeout_s=30)}
    assert all(isinstance(r, ResultMessage) for r in got.values()) and len(got) == 120
    status = subprocess.run(
        [DECISIONS, "ledger", "status", "--batch", batch, "--json"],
        env=fleet["env"], capture_output=True, text=True, timeout=60,
    )
    figures = json.loads(status.stdout)
    assert figures["requests_sent"] == figures["estimate"]["requests"] == 5
    assert figures["calls_sent"] == 120
    billed = sum(r.receipts[0].cost_usd or 0 for r in got.values())
    assert billed == pytest.approx(5 * settings.parallel_list_price_usd)
