"""A worker watched as an operator watches one: its Prometheus port scraped, its JSON log read,
``celery inspect``, ``decisions status`` and Flower pointed at it.

One real ``decisions worker`` (prefork, two pool processes) on the suite's own Redis, a
PostgreSQL schema of its own and a ``decisions faux serve`` process, for the whole module:
figures are compared before and after each test, never as absolute counts.
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared import keys
from shared.client import Client
from shared.settings import Settings
from shared.streams import read_entries
from tests.fleet.support import Samples, flushed, patch_faux, scrape, total, value, worker
from tests.support.fleet import decide_job, wait_until
from tests.support.ownservers import OwnRedis
from tests.support.processes import DECISIONS, decisions_env, faux_server, stop, wait_http
from tests.support.services import free_port, postgres_schema
from worker.ledger import SENT_STATUSES, Ledger

pytestmark = pytest.mark.integration

CANARY_KEY = f"sk-canary-{uuid.uuid4().hex}"
BODY_CANARY = f"body-canary-{uuid.uuid4().hex}"
HOSTNAME = "observed@%h"
CELERY = str(Path(DECISIONS).with_name("celery"))


@dataclass
class Rig:
    r: redis.Redis
    faux_url: str
    ledger_url: str
    port: int
    env: dict[str, str]
    log: Path
    settings: Settings

    def client(self) -> Client:
        return Client(self.settings, redis_client=self.r)

    def run(self, jobs: list[dict[str, Any]], stream: str, chunk_size: int = 1) -> list[Any]:
        client = self.client()
        report = client.submit_batch(jobs, reply_to=stream, chunk_size=chunk_size)
        assert not report.rejected
        return list(client.replies(stream, job_ids=report.job_ids, timeout_s=60))

    def calls(self, job_ids: list[str]) -> list[Any]:
        with Ledger(self.ledger_url) as ledger:
            return [call for job_id in job_ids for call in ledger.calls(job_id)]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, redis_server: OwnRedis) -> Iterator[Rig]:
    logs = tmp_path_factory.mktemp("observability")
    with (
        flushed(redis_server) as (r, url),
        postgres_schema("fleet") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        with Ledger(ledger_url) as ledger:
            ledger.migrate()
        port = free_port()
        canary_host = {"base_url": f"{faux_url}/api", "key_env": "CANARY_API_KEY"}
        env = decisions_env(
            broker_url=url,
            redis_url=url,
            ledger_url=ledger_url,
            faux_url=faux_url,
            metrics_port=str(port),
            metrics_addr="127.0.0.1",
            metrics_fleet_interval_s="0.1",
            worker_pool="prefork",  # pool processes: this test is about them
            worker_concurrency="2",
            log_level="DEBUG",
            systemone_hosts=json.dumps({"canary": {**canary_host, "default_model": "faux-1"}}),
        )
        env["CANARY_API_KEY"] = CANARY_KEY
        env["OPENROUTER_API_KEY"] = CANARY_KEY
        log = logs / "worker.log"
        settings = Settings(broker_url=url, redis_url=url, ledger_url=ledger_url)
        with worker(env, log, f"--hostname={HOSTNAME}"):
            yield Rig(r, faux_url, ledger_url, port, env, log, settings)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def jobs(prefix: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [decide_job(f"{prefix}-{uuid.uuid4().hex[:6]}-{i}", **extra) for i in range(n)]


def test_metrics_count_what_the_jobs_did(rig: Rig) -> None:
    batch = jobs("obs-a", 11)
    refused, failed, unknown = (j["id"] for j in batch[:3])
    patch_faux(
        rig.faux_url,
        {
            "overrides": {
                f"{refused}/decide": {"mode": "refuse"},
                f"{failed}/decide": {"mode": "status", "status_code": 422},
                f"{unknown}/decide": {"mode": "status", "status_code": 503},
            }
        },
    )
    before = scrape(rig.port)
    try:
        replies = rig.run(batch, "obs-a", chunk_size=2)
    finally:
        patch_faux(rig.faux_url, {"overrides": {}})
    after = scrape(rig.port)

    outcomes = Counter(
        r.type if r.type != "escalation" else f"escalation:{r.reason}" for r in replies
    )
    assert outcomes == {
        "result": 8,
        "escalation:decision_refused": 1,
        "escalation:provider_error": 1,
        "escalation:decision_interrupted": 1,
    }
    name = "decisions_jobs_total"
    base = {"kind": "decide", "provider": "faux"}
    assert delta(after, before, name, **base, outcome="result", reason="") == 8
    for reason in ("decision_refused", "provider_error", "decision_interrupted"):
        assert delta(after, before, name, **base, outcome="escalation", reason=reason) == 1

    # Requests by ledger status: the same figures the ledger holds for these jobs.
    calls = rig.calls([j["id"] for j in batch])
    by_status = Counter(c.status for c in calls)
    assert by_status == {"answered": 9, "failed": 1, "unknown": 1}
    for status, n in by_status.items():
        assert delta(after, before, "decisions_requests_total", provider="faux", status=status) == n
    count = "decisions_request_duration_seconds_count"
    assert delta(after, before, count, provider="faux") == len(calls)

    reported = sum(c.cost_usd for c in calls if c.cost_basis == "reported" and c.cost_usd)
    assert reported > 0
    cost = delta(after, before, "decisions_cost_usd_total", provider="faux", basis="reported")
    assert cost == pytest.approx(reported)
    unknown_cost = sum(1 for c in calls if c.status in SENT_STATUSES and c.cost_usd is None)
    assert unknown_cost >= 1  # the 503: the provider may have billed it, nobody knows what
    assert (
        delta(after, before, "decisions_requests_cost_unknown_total", provider="faux")
        == unknown_cost
    )
    assert value(after, "decisions_requests_in_flight", provider="faux") == 0
    # The pool processes' group commits, summed: each job opened and claimed, then finished
    # (a published mark rides on another transaction, or has one of its own: no write).
    writes = delta(after, before, "decisions_group_commit_writes_total")
    assert writes == 2 * len(batch)
    transactions = delta(after, before, "decisions_group_commit_transactions_total")
    assert 1 <= transactions <= writes + len(batch)

    # Fleet gauges, read from the ledger and the escalation stream at scrape time.
    assert value(after, "decisions_fleet_source_up", source="ledger") == 1
    with Ledger(rig.ledger_url) as ledger:
        answered_total = ledger.status().calls_by_status.get("answered", 0)
    assert value(after, "decisions_ledger_calls", status="answered") == answered_total
    assert value(after, "decisions_ledger_calls", status="claimed") == 0
    escalated = sum(1 for e in read_entries(rig.r, keys.ESCALATION_STREAM))
    assert escalated >= 3
    assert value(after, "decisions_escalations_open", state="waiting") == escalated
    assert value(after, "decisions_escalations_open", state="claimed") == 0


def test_requests_in_flight_are_summed_over_the_pool_processes(rig: Rig) -> None:
    batch = jobs("obs-b", 2)
    patch_faux(rig.faux_url, {"latency_ms": 2000})
    client = rig.client()
    try:
        report = client.submit_batch(batch, reply_to="obs-b", chunk_size=1)
        # One message per pool process: both are in flight at once, in two processes.
        wait_until(
            lambda: value(scrape(rig.port), "decisions_requests_in_flight", provider="faux") == 2,
            20,
            "two requests in flight",
        )
        during = scrape(rig.port)
        assert value(during, "decisions_ledger_calls", status="claimed") == 2
        replies = list(client.replies("obs-b", job_ids=report.job_ids, timeout_s=30))
    finally:
        patch_faux(rig.faux_url, {"latency_ms": 0})
    assert [r.type for r in replies] == ["result", "result"]
    after = scrape(rig.port)
    assert value(after, "decisions_requests_in_flight", provider="faux") == 0
    assert total(after, "decisions_request_duration_seconds_bucket", le="1.0") < total(
        after, "decisions_request_duration_seconds_bucket", le="5.0"
    )


def test_a_429_is_counted_as_rate_limited(rig: Rig) -> None:
    patch_faux(rig.faux_url, {"mode": "rate_limit", "retry_after_s": 0, "fail_first": 1})
    before = scrape(rig.port)
    try:
        replies = rig.run(jobs("obs-c", 1), "obs-c")
    finally:
        patch_faux(rig.faux_url, {"mode": "ok", "retry_after_s": None, "fail_first": None})
    after = scrape(rig.port)
    assert [r.type for r in replies] == ["result"]
    assert delta(after, before, "decisions_rate_limited_total", provider="faux") == 1
    assert delta(after, before, "decisions_requests_total", provider="faux", status="answered") == 1


def test_the_log_is_json_lines_with_job_fields_and_no_key_or_body(rig: Rig) -> None:
    state = {"subject": "invoice", "body": f"my account note {BODY_CANARY}"}
    batch = jobs("obs-d", 3, provider="canary", state=state)
    denied = batch[0]["id"]
    patch_faux(
        rig.faux_url, {"overrides": {f"{denied}/decide": {"mode": "status", "status_code": 401}}}
    )
    try:
        replies = rig.run(batch, "obs-d")
    finally:
        patch_faux(rig.faux_url, {"overrides": {}})
    assert Counter(r.type for r in replies) == {"result": 2, "escalation": 1}

    text = rig.log.read_text()
    assert CANARY_KEY not in text
    assert BODY_CANARY not in text
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        event = json.loads(line)  # fails the test on any line that is not one JSON event
        assert isinstance(event, dict) and {"event", "level", "timestamp"} <= set(event), number
        events.append(event)
    finished = {e["job_id"]: e for e in events if e["event"] == "call.finished"}
    for job in batch:
        event = finished[job["id"]]
        assert event["batch"] == job["batch"]
        assert event["step"] == "decide"
        assert event["provider"] == "canary"
    assert finished[denied]["outcome"] == "failed"
    assert {finished[j["id"]]["outcome"] for j in batch[1:]} == {"answered"}
    # Celery's own records are in the same stream, as events too.
    assert any(e.get("logger", "").startswith("celery") and "ready." in e["event"] for e in events)


def celery(rig: Rig, *args: str) -> Any:
    done = subprocess.run(
        [CELERY, "-A", "worker.app", *args, "--json"],
        env=rig.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_decisions_status_and_celery_inspect_during_a_batch(rig: Rig) -> None:
    batch = jobs("obs-e", 4)
    # Long enough that the two running stay running while `decisions status` starts and asks
    # (seconds on a loaded machine: at 6 s CI once saw all four already done).
    patch_faux(rig.faux_url, {"latency_ms": 25000})
    client = rig.client()
    name = HOSTNAME.replace("%h", socket.gethostname())
    try:
        report = client.submit_batch(batch, reply_to="obs-e", chunk_size=1)
        wait_until(
            lambda: value(scrape(rig.port), "decisions_ledger_calls", status="claimed") == 2,
            20,
            "two calls claimed",
        )
        status = subprocess.run(
            [DECISIONS, "status", "--json", "--timeout", "1"],
            env=rig.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        fleet = json.loads(status.stdout)
        # Two messages run (delivered, unacknowledged), two wait their turn in the list.
        assert fleet["queue"] == {"queue": "decisions", "ready": 2, "unacked": 2, "consumers": None}
        assert [w["name"] for w in fleet["workers"]] == [name]
        assert fleet["workers"][0]["concurrency"] == 2
        assert fleet["ledger"]["in_flight"] == 2
        escalated = sum(1 for _ in read_entries(rig.r, keys.ESCALATION_STREAM))
        assert fleet["escalations"] == {
            "waiting": escalated, "claimed": 0, "unreadable": 0, "open": escalated
        }

        # Named destination: the reply ends the wait, no full timeout.
        active = celery(rig, "inspect", "active", "--timeout", "5", "-d", name)
        assert list(active) == [name]
        running = active[name]
        assert {t["name"] for t in running} == {keys.RUN_JOBS_TASK}
        running_ids = {job["id"] for t in running for job in t["kwargs"]["jobs"]}
        assert len(running_ids) == 2 and running_ids <= set(report.job_ids)
    finally:
        patch_faux(rig.faux_url, {"latency_ms": 0})
    list(client.replies("obs-e", job_ids=report.job_ids, timeout_s=60))

    stats = celery(rig, "inspect", "stats", "--timeout", "5", "-d", name)
    assert stats[name]["pool"]["max-concurrency"] == 2
    assert stats[name]["total"][keys.RUN_JOBS_TASK] >= 4


def test_flower_shows_the_worker_and_its_tasks(rig: Rig, tmp_path: Path) -> None:
    port = free_port()
    env = {**rig.env, "FLOWER_UNAUTHENTICATED_API": "true"}
    with (tmp_path / "flower.log").open("wb") as out:
        proc = subprocess.Popen(
            [CELERY, "-A", "worker.app", "flower", f"--port={port}", "--address=127.0.0.1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthcheck", proc, timeout_s=30)

        def task_seen() -> bool:
            tasks = httpx.get(f"{base}/api/tasks", timeout=10).json()
            return any(
                t.get("name") == keys.RUN_JOBS_TASK and t.get("state") == "SUCCESS"
                for t in tasks.values()
            )

        # Flower's event receiver connects a moment after it answers HTTP: a task that ran
        # before then is not in its state. So run jobs until one is seen through its events.
        for attempt in range(10):
            replies = rig.run(jobs(f"obs-f{attempt}", 1), f"obs-f{attempt}")
            assert [r.type for r in replies] == ["result"]
            try:
                wait_until(task_seen, 3, "Flower seeing a task succeed (worker events)")
                break
            except TimeoutError:
                continue
        else:
            raise AssertionError("Flower never saw a task through the worker's events")
        workers = httpx.get(f"{base}/api/workers", params={"refresh": "1"}, timeout=30).json()
        assert any(name.startswith("observed@") for name in workers)
    finally:
        stop(proc)
