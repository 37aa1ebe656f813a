"""Menu jobs on real parts: Redis broker and streams, a PostgreSQL ledger, a `decisions worker`
process importing its handlers from DECISIONS_HANDLERS, and a `decisions faux serve` process
counting every chat request; the handlers count their runs in a file. Then a reviewer
resolves a menu escalation with `decisions escalations resolve`."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.client import Client
from shared.replies import EscalationMessage, RejectedMessage, ResolutionMessage, ResultMessage
from shared.settings import Settings
from shared.streams import read_stream
from tests.menus_worker.support import OPTIONS, menu_job
from tests.support.processes import DECISIONS, decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 8
STREAM = "menus-it:replies"
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("menus-fleet")
    runs = logs / "runs.jsonl"
    with (
        redis_database(REDIS_DB) as r,
        postgres_schema("menus") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            handlers="tests.menus_worker.handlers",
        )
        env["MENUS_TEST_RUNS"] = str(runs)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                _env_file=None,
                broker_url=redis_url(REDIS_DB),
                redis_url=redis_url(REDIS_DB),
                ledger_url=ledger_url,
            )
            yield {"redis": r, "faux": faux_url, "env": env, "settings": settings, "runs": runs}


def handler_runs(fleet: dict[str, Any]) -> Counter[str]:
    path: Path = fleet["runs"]
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["handler"] for line in path.read_text().splitlines())


def faux_calls(fleet: dict[str, Any]) -> dict[str, int]:
    return dict(httpx.get(f"{fleet['faux']}/_faux/calls", timeout=5).json())


def cli(fleet: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DECISIONS, *args], env=fleet["env"], capture_output=True, text=True, timeout=60
    )


def test_menu_jobs_through_a_worker_process(fleet: dict[str, Any]) -> None:
    script = {
        "by_call": {
            "it-refund/pick.0": {"pick": "refund", "args": {"order_id": "A-1", "amount": 2}},
            "it-close/pick.0": {"pick": "close"},
            "it-bad/pick.0": {"content": "I am not sure."},
            "it-bad/pick.1": {"refusal": "No."},
            "it-boom/pick.0": {"pick": "pay", "args": {"reason": "r"}},
            "it-work/turn.0": {
                "tool_calls": [{"name": "t_lookup", "arguments": {"order_id": "Z"}}]
            },
            "it-work/turn.1": {"pick": "escalate", "args": {"team": "technical", "summary": "s"}},
        }
    }
    assert httpx.put(f"{fleet['faux']}/_faux/chat", json=script, timeout=5).status_code == 200
    boom = [*OPTIONS, {"kind": "handler", "name": "pay", "handler": "t_explode"}]
    missing = [*OPTIONS, {"kind": "handler", "name": "wire", "handler": "t_wire"}]
    jobs = [
        menu_job("it-refund"),
        menu_job("it-close"),
        menu_job("it-bad"),
        menu_job("it-boom", options=boom),
        menu_job("it-missing", options=missing),
        menu_job("it-work", work={"tools": ["t_lookup"], "max_steps": 2}),
    ]
    client = Client(fleet["settings"])
    report = client.submit_batch(jobs, reply_to=STREAM, chunk_size=4)
    assert sorted(report.job_ids) == sorted(j["id"] for j in jobs)
    replies = {r.job_id: r for r in client.replies(STREAM, job_ids=report.job_ids, timeout_s=90)}

    refund, close = replies["it-refund"], replies["it-close"]
    assert isinstance(refund, ResultMessage) and isinstance(close, ResultMessage)
    assert refund.value == {"refunded": "A-1", "amount": 2.0, "customer": "Ana"}
    assert close.value == {"status": "closed"}
    bad, boom_reply = replies["it-bad"], replies["it-boom"]
    assert isinstance(bad, EscalationMessage) and bad.reason == "menu_unparseable"
    assert [e["kind"] for e in bad.context["errors"]] == ["no_action", "refusal"]
    assert isinstance(boom_reply, EscalationMessage) and boom_reply.reason == "handler_failed"
    rejected = replies["it-missing"]
    assert isinstance(rejected, RejectedMessage)
    assert [p["field"] for p in rejected.problems] == ["options[4].handler"]
    work = replies["it-work"]
    assert isinstance(work, ResultMessage) and work.value == {"escalated": "technical"}
    assert [r.step for r in work.receipts] == ["turn.0", "tool.0", "turn.1", "handler"]

    calls = faux_calls(fleet)
    assert set(calls.values()) == {1}, (calls, fleet["faux"])
    assert not any(key.startswith("it-missing/") for key in calls)
    runs = handler_runs(fleet)
    assert runs == Counter({"t_refund": 1, "t_explode": 1, "t_lookup": 1, "t_escalate": 1})

    # Submitted again: every job replays; nothing reaches the model or a handler again.
    entries = len(list(read_stream(fleet["redis"], STREAM)))
    again = client.submit_batch(jobs, reply_to=STREAM)
    list(client.replies(STREAM, job_ids=again.job_ids, timeout_s=60))
    assert faux_calls(fleet) == calls
    assert handler_runs(fleet) == runs
    # Replays publish once: the rejected job's second rejection is the only new entry.
    assert len(list(read_stream(fleet["redis"], STREAM))) <= entries + 1

    # The trace reads the PostgreSQL ledger.
    traced = cli(fleet, "trace", "it-work")
    assert traced.returncode == 0, traced.stderr
    assert "tool.0" in traced.stdout and "t_lookup" in traced.stdout


def test_a_reviewer_resolves_a_menu_escalation_with_the_cli(fleet: dict[str, Any]) -> None:
    script = {
        "by_call": {
            "it-review/pick.0": {"content": "hmm"},
            "it-review/pick.1": {"content": "hmm again"},
        }
    }
    httpx.patch(f"{fleet['faux']}/_faux/chat", json=script, timeout=5)
    client = Client(fleet["settings"])
    report = client.submit(menu_job("it-review", batch="menus-review"), reply_to=STREAM)
    [reply] = list(client.replies(STREAM, job_ids=report.job_ids, timeout_s=60))
    assert isinstance(reply, EscalationMessage) and reply.reason == "menu_unparseable"

    claimed = cli(
        fleet,
        "escalations",
        "claim",
        "--batch",
        "menus-review",
        "--json",
        "--reviewer",
        "rita",
    )
    assert claimed.returncode == 0, claimed.stderr
    entry = json.loads(claimed.stdout)
    assert entry["escalation"]["job_id"] == "it-review"
    bad = cli(
        fleet,
        "escalations",
        "resolve",
        entry["id"],
        "--reviewer",
        "rita",
        "--answer",
        '{"call": "plan", "args": {"steps": [{"action": "fax"}]}}',
    )
    assert bad.returncode == 2
    assert "answer.args.steps[0].action" in bad.stderr
    good = cli(
        fleet,
        "escalations",
        "resolve",
        entry["id"],
        "--reviewer",
        "rita",
        "--answer",
        '{"call": "close"}',
    )
    assert good.returncode == 0, good.stderr
    resolutions = [
        e
        for e in read_stream(fleet["redis"], STREAM)
        if e.job_id == "it-review" and e.type == "resolution"
    ]
    assert len(resolutions) == 1
    resolution = ResolutionMessage.model_validate_json(resolutions[0].message)
    assert resolution.answer == {"call": "close", "args": {}, "value": {"status": "closed"}}
    assert resolution.reviewer == "rita"
