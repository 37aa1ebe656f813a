"""Control characters in the job fields the ledger keeps in text columns (``batch``, a
``provider`` or ``model``, a question id): refused at submit, each by its field, and by a
worker that receives such a job raw, with a ``rejected`` terminal message.

PostgreSQL text columns cannot hold a NUL. ``Client`` took ``batch: "b\\x00x"``; the worker's
first write of the job failed with psycopg's DataError, the task failed and the job (and every
other job of its message) never got a terminal message. A ``model`` with a NUL failed the
call's claim the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared import keys
from shared.client import Client
from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.settings import Settings
from shared.streams import read_stream
from tests.support.envelopes import raw_envelope, task_body
from tests.support.processes import decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

REDIS_DB = 10
REPLY_TO = "control-chars:replies"
QUESTIONS = {"q": {"type": "noul", "instructions": "Is it urgent?"}}


def decide(job_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "decide",
        "reply_to": REPLY_TO,
        "state": "the printer is on fire",
        "questions": QUESTIONS,
        **fields,
    }


SIFT = {"kind": "sift", "items": ["a", "b"], "question": {"instructions": "Spam?"}}
ROUTE = {"kind": "route", "state": "s", "routes": {"billing": None, "tech": None}}
MENU = {
    "kind": "menu",
    "prompt": "Pick one.",
    "options": [{"name": "done", "kind": "value", "value": 1}],
}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"batch": "b\x00x"}, "batch"),
        ({"batch": "two\nlines"}, "batch"),
        ({"batch": "bell\x07"}, "batch"),
        ({"batch": "c1\x85"}, "batch"),
        ({"model": "faux-1\x00x"}, "model"),
        ({"provider": "faux\x00"}, "provider"),
        ({"verify": {"model": "faux-2\x00"}}, "verify.model"),
        ({"verify": {"provider": "\x00faux"}}, "verify.provider"),
        ({"questions": {"q\x00": QUESTIONS["q"]}}, "questions"),
        ({**SIFT, "model": "m\x00"}, "model"),
        ({**SIFT, "provider": "p\r"}, "provider"),
        ({**ROUTE, "model": "m\x00"}, "model"),
        ({**MENU, "runtime": {"model": "m\x00"}}, "runtime.model"),
        ({**MENU, "runtime": {"provider": "p\x1b[31m"}}, "runtime.provider"),
    ],
)
def test_a_control_character_is_refused_by_its_field(fields: dict[str, Any], field: str) -> None:
    job = decide("cc", **fields)
    if fields.get("kind") not in (None, "decide"):
        del job["questions"]
        if fields["kind"] != "route":
            del job["state"]
    with pytest.raises(JobInvalid) as info:
        parse_job(job)
    problems = info.value.problems
    assert [p.field for p in problems] == [field], problems
    assert "control character" in problems[0].message


def test_printable_names_are_taken() -> None:
    job = parse_job(
        decide("ok", batch="Q3 claims · Zürich", model="faux-1", verify={"model": "faux-2"})
    )
    assert job.batch == "Q3 claims · Zürich"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("control-chars")
    with (
        redis_database(REDIS_DB) as r,
        postgres_schema("controlchars") as ledger_url,
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
                _env_file=None,
                broker_url=redis_url(REDIS_DB),
                redis_url=redis_url(REDIS_DB),
                ledger_url=ledger_url,
                faux_url=faux_url,
            )
            yield {"redis": r, "settings": settings, "logs": logs}


NUL_JOBS = [
    decide("nul-batch", batch="b\x00x"),
    decide("nul-model", model="faux-1\x00x"),
    decide("nul-verify", verify={"model": "faux-2\x00"}),
]


@pytest.mark.integration
def test_the_client_rejects_it_at_submit(fleet: dict[str, Any]) -> None:
    client = Client(fleet["settings"])
    report = client.submit_batch([*NUL_JOBS, decide("fine-1")], reply_to=REPLY_TO)
    assert report.job_ids == ["fine-1"]
    assert {job_id: [p.field for p in ps] for job_id, ps in report.rejected.items()} == {
        "nul-batch": ["batch"],
        "nul-model": ["model"],
        "nul-verify": ["verify.model"],
    }
    got = list(client.replies(REPLY_TO, job_ids=report.all_ids, timeout_s=60))
    assert {m.job_id: m.type for m in got} == {
        "fine-1": "result",
        "nul-batch": "rejected",
        "nul-model": "rejected",
        "nul-verify": "rejected",
    }


@pytest.mark.integration
def test_a_worker_given_it_raw_rejects_it(fleet: dict[str, Any]) -> None:
    """Published as a Celery message by hand, bypassing ``Client``: each job in one message
    with a good one, which the lost task took down with it."""
    r = fleet["redis"]
    ids = []
    for job in NUL_JOBS:
        raw = {**job, "id": "raw-" + job["id"]}
        good = decide("raw-good-" + job["id"])
        r.lpush(keys.CELERY_QUEUE, json.dumps(raw_envelope(task_body(raw, good))))
        ids += [raw["id"], good["id"]]
    until = time.monotonic() + 60
    seen: dict[str, list[dict[str, Any]]] = {}
    while time.monotonic() < until and set(seen) != set(ids):
        seen = {}
        for entry in read_stream(r, REPLY_TO):
            if entry.job_id in ids:
                seen.setdefault(entry.job_id, []).append(json.loads(entry.message))
        time.sleep(0.2)
    log = (fleet["logs"] / "worker.log").read_text(errors="replace")
    assert set(seen) == set(ids), log[-3000:]
    assert all(len(messages) == 1 for messages in seen.values()), seen
    fields = {"raw-nul-batch": "batch", "raw-nul-model": "model", "raw-nul-verify": "verify.model"}
    for job_id, field in fields.items():
        (message,) = seen[job_id]
        assert message["type"] == "rejected", message
        assert [p["field"] for p in message["problems"]] == [field]
    for job in NUL_JOBS:
        assert seen["raw-good-" + job["id"]][0]["type"] == "result"
    assert "DataError" not in log and "Traceback" not in log
