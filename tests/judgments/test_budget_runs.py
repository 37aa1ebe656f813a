"""Budgets through the embedded worker against the faux server, for the kinds beyond a plain
decide: a packed batch reserves for all a request's members at once (and, refused, its
members go alone and escalate ``budget_exhausted``); a sift job's requests each reserve, so
the one that does not fit is not sent and its items escalate. Parallel's list price makes
every figure exact: $0.001 a request, reserved and booked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shared.replies import EscalationMessage
from tests.judgments.support import REPLY_TO, replies, settings_for, sift_job
from worker.embedded import run_batch
from worker.ledger import Ledger
from worker.testing.faux import FauxServer

STATE = "Store policy: refunds within 30 days of delivery."


def packed(job_id: str, budget: float) -> dict[str, Any]:
    return {
        "id": job_id,
        "batch": "budget-packs",
        "reply_to": REPLY_TO,
        "provider": "parallel",
        "state": STATE,
        "budget_usd": budget,
        "questions": {
            f"q{k}": {"type": "noul", "instructions": f"{job_id}, clause {k}: refund?"}
            for k in range(3)
        },
    }


def test_a_packed_request_reserves_for_all_its_members_or_none(
    tmp_path: Path, server: FauxServer
) -> None:
    # 66 jobs of 3 questions: two Parallel requests of 33 jobs; the budget holds one.
    settings = settings_for(tmp_path, server.url, pack_chunk_size=100)
    batch = [packed(f"p{i:03d}", 0.0015) for i in range(66)]
    run_batch(batch, settings=settings, out_dir=tmp_path / "out", pack=True, timeout_s=60)

    assert sum(server.provider.calls().values()) == 1  # the second request was never sent
    got = replies(tmp_path / "out")
    outcomes = Counter(
        f"escalation:{r.reason}" if isinstance(r, EscalationMessage) else r.type
        for r in got.values()
    )
    assert outcomes == {"result": 33, "escalation:budget_exhausted": 33}
    exhausted = next(r for r in got.values() if isinstance(r, EscalationMessage))
    assert exhausted.context["budget"]["limit_usd"] == 0.0015
    assert exhausted.context["budget"]["worst_case_usd"] == 0.001
    with Ledger(settings.ledger_url) as ledger:
        budget = ledger.budget("budget-packs")
    assert budget is not None and budget.committed_usd == pytest.approx(0.001)
    assert budget.booked_by_basis == {"estimate": pytest.approx(0.001)}
    assert budget.jobs_exhausted == 33


def test_a_sift_request_that_does_not_fit_is_not_sent(tmp_path: Path, server: FauxServer) -> None:
    # 150 items: two Parallel requests (100 questions at most); the budget holds one.
    settings = settings_for(tmp_path, server.url)
    job = sift_job("s1", [f"message {i}" for i in range(150)], provider="parallel")
    job["budget_usd"] = 0.0015
    run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=60)

    assert sum(server.provider.calls().values()) == 1
    reply = replies(tmp_path / "out")["s1"]
    assert isinstance(reply, EscalationMessage) and reply.reason == "budget_exhausted"
    statuses = Counter(item.status for item in reply.items or [])
    assert statuses["not_sent"] == 50 and statuses["not_sent"] + statuses["decided"] == 150
    assert "budget batch:" in reply.detail or "not_sent" in reply.detail


def test_a_menu_job_cannot_carry_a_budget(tmp_path: Path, server: FauxServer) -> None:
    settings = settings_for(tmp_path, server.url)
    job = {
        "id": "m1",
        "kind": "menu",
        "batch": "b",
        "budget_usd": 1.0,
        "reply_to": REPLY_TO,
        "prompt": "Pick one.",
        "options": [{"kind": "value", "name": "yes", "value": True}],
    }
    run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=60)
    reply = replies(tmp_path / "out")["m1"]
    assert reply.type == "rejected"
    assert [p["field"] for p in reply.problems] == ["budget_usd"]
    assert not server.provider.calls()
