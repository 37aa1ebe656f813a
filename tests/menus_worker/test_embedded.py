"""Menu jobs end to end through the embedded worker (``worker.embedded.run_batch``: a real
Celery worker in process, memory broker, SQLite ledger), asking a faux server that counts
every request, with handlers that count every run; and the example batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.settings import Settings
from tests.menus_worker import handlers
from tests.menus_worker.support import OPTIONS, menu_job
from worker.embedded import run_batch
from worker.process import context
from worker.testing.faux import FauxChatBehaviour, FauxChatReply, FauxServer

EXAMPLE = Path(__file__).parents[2] / "examples" / "menus" / "tickets_menu.jsonl"


@pytest.fixture
def server() -> Iterator[FauxServer]:
    with FauxServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _reset_context() -> Iterator[None]:
    yield
    context.configure()


def settings_for(tmp_path: Path, server: FauxServer, *modules: str) -> Settings:
    return Settings(
        _env_file=None,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        faux_url=server.url,
        handlers=list(modules),
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_menu_batch_runs_once_and_replays(tmp_path: Path, server: FauxServer) -> None:
    server.provider.chat.set_behaviour(
        FauxChatBehaviour(
            by_call={
                "e-refund/pick.0": FauxChatReply(
                    pick="refund", args={"order_id": "A-5", "amount": 4}
                ),
                "e-close/pick.0": FauxChatReply(pick="close"),
                "e-bad/pick.0": FauxChatReply(content="no idea"),
                "e-bad/pick.1": FauxChatReply(content="still none"),
            }
        )
    )
    decide = {
        "id": "e-decide",
        "state": "the parcel never arrived",
        "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
    }
    unregistered = [*OPTIONS, {"kind": "handler", "name": "x", "handler": "t_missing"}]
    batch = [
        menu_job("e-refund"),
        menu_job("e-close"),
        menu_job("e-bad"),
        menu_job("e-missing", options=unregistered),
        decide,
    ]
    settings = settings_for(tmp_path, server, "tests.menus_worker.handlers")
    first = run_batch(batch, settings=settings, out_dir=tmp_path / "out1", timeout_s=60)
    assert dict(first.by_type) == {"result": 3, "escalation": 1, "rejected": 1}
    assert dict(first.escalation_reasons) == {"menu_unparseable": 1}
    calls = server.provider.calls()
    assert calls == {
        "e-refund/pick.0": 1,
        "e-close/pick.0": 1,
        "e-bad/pick.0": 1,
        "e-bad/pick.1": 1,
        "e-decide/decide": 1,
    }
    assert [n for n, _ in handlers.RUNS] == ["t_refund"]
    results = {r["job_id"]: r for r in lines_of(tmp_path / "out1" / "results.jsonl")}
    assert results["e-refund"]["value"] == {"refunded": "A-5", "amount": 4.0, "customer": "Ana"}
    assert results["e-close"]["value"] == {"status": "closed"}
    rejected = lines_of(tmp_path / "out1" / "rejected.jsonl")
    assert [p["field"] for p in rejected[0]["problems"]] == ["options[4].handler"]

    second = run_batch(batch, settings=settings, out_dir=tmp_path / "out2", timeout_s=60)
    assert second.requests_sent == 0
    assert server.provider.calls() == calls
    assert [n for n, _ in handlers.RUNS] == ["t_refund"]
    for name in ("results.jsonl", "escalations.jsonl"):  # rejections are not stored
        assert (tmp_path / "out1" / name).read_text() == (tmp_path / "out2" / name).read_text()


def test_the_example_menu_batch_runs_on_the_faux(tmp_path: Path, server: FauxServer) -> None:
    jobs = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.startswith("{")]
    settings = settings_for(tmp_path, server, "examples.menus.handlers")
    summary = run_batch(jobs, settings=settings, out_dir=tmp_path / "out", timeout_s=60)
    valid = [j for j in jobs if "invalid" not in j["id"]]
    assert summary.by_type["result"] + summary.by_type["escalation"] == len(valid)
    assert summary.by_type["rejected"] == len(jobs) - len(valid) == 2
    assert summary.cost_unknown_calls == 0 and summary.cost_usd_this_run > 0
    calls = server.provider.calls()
    assert set(calls.values()) == {1}
    work = [j["id"] for j in valid if "work" in j]
    assert {f"{w}/turn.0" for w in work} <= set(calls)
    results = lines_of(tmp_path / "out" / "results.jsonl")
    steps = {r["job_id"]: [x["step"] for x in r["receipts"]] for r in results}
    assert any("tool.0" in s for s in steps.values())
