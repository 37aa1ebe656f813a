"""Cost before submit: a dry run validates, counts the requests after packing and prices them,
sending nothing (nothing reaches the faux, no Celery message is published); the real run's
receipts then match its request counts, and its cost is within the stated accuracy.

A Redis of the test's own (``own_redis``) holds what the dry run stores, so that "nothing
but the estimate was written" is a check no other test's traffic can spoil.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from shared import keys
from shared.client import Client
from shared.settings import Settings
from tests.judgments.support import (
    BATCH,
    REPLY_TO,
    route_job,
    settings_for,
    sift_job,
    verified_job,
)
from tests.support.ownservers import OwnRedis, own_redis
from tests.support.processes import DECISIONS, decisions_env
from worker.embedded import run_batch
from worker.kinds.judgments import judgment_checker
from worker.kinds.judgments.dryrun import worker_prices
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer

pytestmark = pytest.mark.integration

SENT = ("answered", "failed", "unknown")


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    with own_redis() as server:
        yield server


@pytest.fixture
def r(own: OwnRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own.url())
    yield client
    client.close()


def batch() -> list[dict[str, Any]]:
    return [
        sift_job("d-parallel", [f"message {i}" for i in range(250)], provider="parallel"),
        sift_job("d-faux", [f"message {i:04d} " + "y" * 900 for i in range(400)]),
        route_job("d-route"),
        verified_job("d-verify", "Ticket: payouts failing", model="typesafe/jev-1.14",
                     stakes="high"),
        {"id": "d-plain", "batch": BATCH, "reply_to": REPLY_TO, "state": "hello",
         "questions": {"q": {"type": "noul", "instructions": "Greeting?"}}},
        {**sift_job("d-bad", ["ok", "x" * 6_000], provider="parallel")},
    ]


def client_for(settings: Settings) -> Client:
    registry = ProviderRegistry.from_settings(settings)
    return Client(
        settings, checker=judgment_checker(registry, lambda job: registry.check(
            job.provider, job.model
        )),
    )


def test_a_dry_run_sends_nothing_and_predicts_the_real_run(
    tmp_path: Path, server: FauxServer, own: OwnRedis, r: redis.Redis
) -> None:
    settings = settings_for(tmp_path, server.url, redis_url=own.url(), broker_url=own.url())
    client = client_for(settings)
    report = client.estimate(batch(), prices=worker_prices(settings))

    assert server.provider.total() == 0
    # No Celery message (no queue list), no reply stream: only the stored estimate.
    assert {k.decode() for k in r.keys("*")} == {keys.batch_estimate(BATCH)}
    assert list(report.rejected) == ["d-bad"]
    assert [p.field for p in report.rejected["d-bad"]] == ["items.1"]
    estimate = report.total
    assert estimate.jobs == 5
    assert {n: p.requests for n, p in estimate.by_provider.items()} == {
        "parallel": 3, "faux": 2 + 1 + 1 + 2 + 1,
    }
    stored = client.stored_estimate(BATCH)
    assert stored is not None and stored.requests == estimate.requests == 10

    valid = [j for j in batch() if j["id"] != "d-bad"]
    run = run_batch(valid, settings=settings, out_dir=tmp_path / "out", timeout_s=120)
    receipts = []
    for name in ("results", "escalations"):
        for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines():
            receipts += json.loads(line)["receipts"]
    sent = [rc for rc in receipts if rc["status"] in SENT]
    assert run.requests_sent == len(sent) == server.provider.total() == estimate.requests
    assert Counter(rc["provider"] for rc in sent) == {
        n: p.requests for n, p in estimate.by_provider.items()
    }
    for name, entry in estimate.by_provider.items():
        booked = sum(rc["cost_usd"] for rc in sent if rc["provider"] == name)
        assert entry.cost_usd is not None
        assert abs(booked - entry.cost_usd) <= entry.accuracy * entry.cost_usd, name
    assert estimate.by_provider["parallel"].cost_usd == pytest.approx(
        3 * settings.parallel_list_price_usd
    )


def test_submit_dry_run_and_ledger_status_on_the_command_line(
    tmp_path: Path, server: FauxServer, own: OwnRedis, r: redis.Redis
) -> None:
    lines = tmp_path / "batch.jsonl"
    lines.write_text("\n".join(json.dumps(j) for j in batch()) + "\n")
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = decisions_env(
        broker_url=own.url(), redis_url=own.url(), ledger_url=ledger_url,
        faux_url=server.url, parallel_base_url=server.url,
    )
    dry = subprocess.run(
        [DECISIONS, "submit", str(lines), "--reply-to", REPLY_TO, "--dry-run", "--json",
         "--price", "openrouter=0.5"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert dry.returncode == 0, dry.stderr
    printed = json.loads(dry.stdout)
    assert printed["total"]["requests"] == 10
    assert printed["total"]["by_provider"]["parallel"]["basis"] == "list_price"
    assert list(printed["rejected"]) == ["d-bad"]
    assert server.provider.total() == 0
    assert {k.decode() for k in r.keys("*")} == {keys.batch_estimate(BATCH)}

    table = subprocess.run(
        [DECISIONS, "submit", str(lines), "--reply-to", REPLY_TO, "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert "10 request(s) after packing; nothing was sent" in " ".join(table.stdout.split())
    assert "rejected d-bad" in table.stderr

    settings = settings_for(tmp_path, server.url, redis_url=own.url())
    valid = [j for j in batch() if j["id"] != "d-bad"]
    run_batch(valid, settings=settings, out_dir=tmp_path / "out", timeout_s=120)
    status = subprocess.run(
        [DECISIONS, "ledger", "status", "--batch", BATCH, "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert status.returncode == 0, status.stderr
    figures = json.loads(status.stdout)
    assert figures["requests_sent"] == figures["estimate"]["requests"] == 10
    known = sum(v for k, v in figures["cost_by_basis"].items() if k != "unknown" and v)
    assert known == pytest.approx(figures["estimate"]["cost_known_usd"], rel=0.25)
    shown = subprocess.run(
        [DECISIONS, "ledger", "status", "--batch", BATCH],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert "cost estimated" in shown.stdout and "requests estimated" in shown.stdout
