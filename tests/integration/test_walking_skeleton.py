"""End to end on real parts: Redis broker and streams, PostgreSQL ledger, a `decisions worker`
process and a `decisions faux serve` process counting every request it receives."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.client import Client
from shared.settings import Settings
from shared.streams import read_stream
from tests.support.processes import DECISIONS, decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 9
EXAMPLES = Path(__file__).parents[2] / "examples" / "tickets.jsonl"


def example_jobs() -> list[dict[str, object]]:
    jobs = []
    for line in EXAMPLES.read_text().splitlines():
        try:
            jobs.append(json.loads(line))
        except ValueError:
            continue
    return jobs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    logs = tmp_path_factory.mktemp("fleet")
    with (
        redis_database(REDIS_DB) as r,
        postgres_schema("skeleton") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
        )
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                broker_url=redis_url(REDIS_DB), redis_url=redis_url(REDIS_DB), ledger_url=ledger_url
            )
            yield {"redis": r, "faux": faux_url, "env": env, "settings": settings, "logs": logs}


def faux_calls(faux_url: str) -> dict[str, int]:
    return dict(httpx.get(f"{faux_url}/_faux/calls", timeout=5).json())


def test_200_jobs_each_get_one_terminal_message_and_one_request(fleet: dict[str, object]) -> None:
    settings = fleet["settings"]
    assert isinstance(settings, Settings)
    jobs = example_jobs()
    valid = [j for j in jobs if str(j["id"]).startswith("ticket-0")]
    assert len(valid) >= 200
    client = Client(settings)
    report = client.submit_batch(jobs, reply_to="skeleton-r1", chunk_size=16)
    assert sorted(report.job_ids) == sorted(str(j["id"]) for j in valid)
    assert report.rejected_count == len(jobs) - len(valid)

    replies = list(client.replies("skeleton-r1", job_ids=report.job_ids, timeout_s=120))
    assert sorted(r.job_id for r in replies) == sorted(report.job_ids)

    # On the stream itself, not only through the deduplicating iterator: exactly one each.
    entries = list(read_stream(fleet["redis"], "skeleton-r1"))  # type: ignore[arg-type]
    per_job = Counter(e.job_id for e in entries)
    assert all(per_job[job_id] == 1 for job_id in report.job_ids)
    rejected = [json.loads(e.message) for e in entries if e.type == "rejected"]
    assert len(rejected) == report.rejected_count
    assert all(msg["problems"] and msg["problems"][0]["field"] for msg in rejected)

    calls = faux_calls(str(fleet["faux"]))
    assert {key.split("/")[0] for key in calls} == set(report.job_ids)
    assert set(calls.values()) == {1}

    # Resubmitted: nothing new reaches the provider or the stream, every job still answered.
    again = client.submit_batch(valid, reply_to="skeleton-r1", chunk_size=16)
    replies_again = list(client.replies("skeleton-r1", job_ids=again.job_ids, timeout_s=60))
    assert len(replies_again) == len(valid)
    import time

    time.sleep(2)  # let the redeliveries finish replaying
    assert faux_calls(str(fleet["faux"])) == calls
    assert len(list(read_stream(fleet["redis"], "skeleton-r1"))) == len(entries)  # type: ignore[arg-type]


def test_cli_submit_wait_and_results(fleet: dict[str, object]) -> None:
    env = dict(fleet["env"])  # type: ignore[call-overload]
    done = subprocess.run(
        [
            DECISIONS,
            "submit",
            str(EXAMPLES),
            "--reply-to",
            "skeleton-cli",
            "--wait",
            "--timeout",
            "120",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "every job has replied" in done.stdout
    assert "rejected ticket-invalid-score" in done.stderr.replace("\n", " ")
    printed = subprocess.run(
        [DECISIONS, "results", "skeleton-cli"], env=env, capture_output=True, text=True, timeout=60
    )
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    kinds = Counter(line["type"] for line in lines)
    assert kinds["rejected"] == 6
    assert kinds["result"] + kinds["escalation"] == 240
