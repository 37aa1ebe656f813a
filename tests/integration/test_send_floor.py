"""A request with less time left than its provider's answers take is not sent.

A job dequeued with little of its deadline left used to be sent all the same and cut off in
flight: ``decision_interrupted``, its outcome unknown and maybe paid. Now, once a worker has
seen its provider's answers take 1.5 s, a job with a second left escalates
``deadline_exceeded`` with nothing sent; with ``DECISIONS_SEND_FLOOR_QUANTILE=0`` it is sent
and cut off, as before.

Real parts: a Redis broker and stream, a PostgreSQL ledger, a ``decisions worker`` process and
a ``decisions faux serve`` process counting every request it receives."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from shared.client import Client
from shared.settings import Settings
from tests.support.fleet import decide_job
from tests.support.processes import decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url
from worker.providers.latency import MIN_SAMPLES

pytestmark = pytest.mark.integration

REDIS_DB = 5
LATENCY_MS = 1500


@pytest.mark.parametrize("quantile", ["0.5", "0"])
def test_a_job_with_less_time_left_than_answers_take_is_not_sent(
    quantile: str, tmp_path: Path
) -> None:
    with (
        redis_database(REDIS_DB),
        postgres_schema(f"floor{quantile.replace('.', '')}") as ledger_url,
        faux_server(log=tmp_path / "faux.log") as faux_url,
    ):
        httpx.patch(
            f"{faux_url}/_faux/behaviour", json={"latency_ms": LATENCY_MS}, timeout=10
        ).raise_for_status()
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            send_floor_quantile=quantile,
        )
        with worker_process(env, "--migrate", log=tmp_path / "worker.log"):
            client = Client(
                Settings(
                    _env_file=None,
                    broker_url=redis_url(REDIS_DB),
                    redis_url=redis_url(REDIS_DB),
                    ledger_url=ledger_url,
                )
            )
            # Answered (and their times noted) before the late job is sent.
            warm = [decide_job(f"floor-{i}", timeout_s=60) for i in range(MIN_SAMPLES + 2)]
            report = client.submit_batch(warm, reply_to="floor", chunk_size=1)
            replies = client.replies("floor", job_ids=report.job_ids, timeout_s=60)
            assert [reply.type for reply in replies] == ["result"] * len(warm)
            # A second left, where answers take 1.5 s: a slow pickup still leaves some.
            late = client.submit(decide_job("floor-late", timeout_s=1.0), reply_to="floor")
            (reply,) = client.replies("floor", job_ids=late.job_ids, timeout_s=60)
        calls = dict(httpx.get(f"{faux_url}/_faux/calls", timeout=5).json())
    message = json.loads(reply.model_dump_json())
    assert message["type"] == "escalation"
    if quantile == "0":
        assert message["reason"] == "decision_interrupted"
        assert "floor-late/decide" in calls, "sent, and cut off in flight"
    else:
        assert message["reason"] == "deadline_exceeded"
        assert "DECISIONS_SEND_FLOOR_QUANTILE" in json.dumps(message)
        assert "floor-late/decide" not in calls, "never sent"
    assert sum(1 for key in calls if key.startswith("floor-")) == MIN_SAMPLES + 2 + (
        quantile == "0"
    )
