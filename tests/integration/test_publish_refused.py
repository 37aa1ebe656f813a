"""#15 defect 1 through a real worker: a publish Redis refuses (the reply key is not a
stream) writes nothing, leaves the job unpublished in the ledger with one clear log line,
and the reaper's outbox relay publishes it once the key is usable."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from shared import keys
from shared.client import Client
from shared.settings import Settings
from shared.streams import read_stream
from tests.support.ownservers import own_redis
from tests.support.processes import decisions_env, worker_process
from worker.ledger import Ledger

pytestmark = pytest.mark.integration

STREAM = "refused:replies"


def test_a_refused_publish_is_relayed_once_the_key_is_a_stream(tmp_path: Path) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with own_redis() as server:
        url = server.url()
        r = redis.Redis.from_url(url)
        r.rpush(keys.reply_stream(STREAM), "someone else's list")
        env = decisions_env(
            broker_url=url, redis_url=url, ledger_url=ledger_url, reaper_interval_s="1"
        )
        log = tmp_path / "worker.log"
        with worker_process(env, "--migrate", log=log):
            client = Client(Settings(broker_url=url, redis_url=url), redis_client=r)
            job = {
                "id": "blocked-1",
                "kind": "decide",
                "state": "s",
                "questions": {"q": {"type": "noul", "instructions": "Yes?"}},
            }
            client.submit_batch([job], reply_to=STREAM)
            with Ledger(ledger_url) as ledger:
                row = None
                until = time.monotonic() + 60
                while time.monotonic() < until:
                    row = ledger.get_job("blocked-1")
                    if row is not None and row.finished:
                        break
                    time.sleep(0.2)
                assert row is not None and row.finished
                time.sleep(3)  # a few reaper rounds: each relay is refused too
                assert ledger.get_job("blocked-1").published_at is None  # type: ignore[union-attr]
            assert r.exists(keys.published_marker(STREAM, "blocked-1")) == 0
            text = log.read_text(errors="replace")
            assert "blocked-1" in text and "wrote nothing" in text and "WRONGTYPE" in text
            r.delete(keys.reply_stream(STREAM))  # the operator frees the name
            replies = list(client.replies(STREAM, job_ids=["blocked-1"], timeout_s=60))
        assert [reply.job_id for reply in replies] == ["blocked-1"]
        assert len(list(read_stream(r, STREAM))) == 1
        with Ledger(ledger_url) as ledger:
            assert ledger.get_job("blocked-1").published_at is not None  # type: ignore[union-attr]
