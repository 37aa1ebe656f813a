"""#16 deliverable 3 through a real worker: a ``reply_to`` named like the Celery queue, the
escalation stream or kombu's bookkeeping gets its replies in the reply namespace, and those
keys stay what they were (before, ``reply_to: "decisions"`` made a stream of the Celery queue
and every later submit failed with WRONGTYPE)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared import keys
from shared.client import Client
from shared.settings import Settings
from shared.streams import publish_once
from tests.support.ownservers import own_redis
from tests.support.processes import decisions_env, worker_process

pytestmark = pytest.mark.integration

NAMES = ["decisions", "decisions:escalations", "unacked_index", "unacked"]


def job(job_id: str) -> dict[str, object]:
    return {
        "id": job_id,
        "kind": "decide",
        "state": "s",
        "questions": {"q": {"type": "noul", "instructions": "Yes?"}},
    }


def test_reply_streams_named_like_internal_keys_never_touch_them(tmp_path: Path) -> None:
    with own_redis() as server:
        url = server.url()
        r = redis.Redis.from_url(url)
        publish_once(  # an escalation stream with an entry, as a fleet has
            r, stream="other", job_id="e", message_type="escalation", message_json="{}",
            escalation=True,
        )  # fmt: skip
        env = decisions_env(
            broker_url=url, redis_url=url, ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}"
        )
        with worker_process(env, "--migrate", log=tmp_path / "worker.log"):
            client = Client(Settings(broker_url=url, redis_url=url), redis_client=r)
            for name in NAMES:
                report = client.submit_batch([job(f"to-{name}")], reply_to=name)
                [reply] = list(client.replies(name, job_ids=report.job_ids, timeout_s=60))
                assert reply.job_id == f"to-{name}" and reply.type == "result"
            # The queue still takes work: a later job is answered as before.
            report = client.submit_batch([job("after")], reply_to="plain")
            assert len(list(client.replies("plain", job_ids=report.job_ids, timeout_s=60))) == 1
        for name in NAMES:
            assert r.type(keys.reply_stream(name)) == b"stream"
        assert r.type("decisions") in (b"list", b"none")
        assert r.type("unacked_index") in (b"zset", b"none")
        assert r.type("_kombu.binding.decisions") in (b"set", b"none")
        assert r.xlen(keys.ESCALATION_STREAM) == 1
