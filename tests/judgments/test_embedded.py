"""A batch of sift, route and verify jobs through the embedded worker (a real Celery worker in
process, SQLite ledger) against a faux server that counts every request by call key; the
counts are compared with the packing the limits allow, the answers with the faux's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shared.judgments import DEFAULT_ROUTE_INSTRUCTIONS
from shared.replies import EscalationMessage, ResultMessage
from tests.judgments.support import (
    faux_noul,
    replies,
    requests_for,
    route_job,
    settings_for,
    sift_job,
    system_one_capacity,
    verified_job,
    wire_item,
)
from worker.embedded import run_batch
from worker.testing.faux import FauxBehaviour, FauxServer, answer_question

QUESTION = "Is this message spam?"
STATE = "A shared mailbox of a small shop."
CHECKER = "typesafe/jev-1.14"
VERIFY_QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": None, "technical": None},
    },
}


def items(n: int, size: int = 0) -> list[str]:
    # Same length each, so that a request's capacity is one number.
    return [f"message {i:04d} " + "x" * size for i in range(n)]


def agreement(state: str) -> dict[str, bool]:
    """Per question, whether faux-1 and the checker agree about ``state`` (the oracle)."""
    out = {}
    for qid, q in VERIFY_QUESTIONS.items():
        first, second = answer_question("faux-1", q, state), answer_question(CHECKER, q, state)
        if q["type"] == "noul":
            out[qid] = (first["noul"] >= 0.5) == (second["noul"] >= 0.5)
        else:
            out[qid] = first["choice"] == second["choice"]
    return out


def state_where(agree: bool) -> str:
    for n in range(500):
        state = f"Ticket {n}: my payouts have failed for three days."
        if all(agreement(state).values()) == agree:
            return state
    raise AssertionError("no such state in 500 tries")


def route_answer(state: str) -> dict[str, Any]:
    """The faux's answer to a route job's question (the default instructions)."""
    question = {
        "type": "choice",
        "instructions": DEFAULT_ROUTE_INSTRUCTIONS,
        "criteria": route_job("x")["routes"],
    }
    return answer_question("faux-1", question, state)


def test_sift_route_verify_batch_sends_the_packed_requests_once(
    tmp_path: Path, server: FauxServer
) -> None:
    system_one_items = items(520, size=1000)
    capacity = (
        system_one_capacity(STATE, wire_item(QUESTION, system_one_items[0]), ids=3),
        system_one_capacity(STATE, wire_item(QUESTION, system_one_items[0]), ids=1),
    )
    s1_requests = requests_for(520, capacity[0])
    assert s1_requests == requests_for(520, capacity[1]) > 1
    agree, disagree = state_where(True), state_where(False)
    low = route_job("r-low", floor=0.99)
    assert route_answer(low["state"])["confidence"] < 0.99
    batch = [
        sift_job("s-parallel", items(230), provider="parallel"),
        sift_job("s-faux", system_one_items),
        sift_job("s-refused", items(5)),
        route_job("r-chosen"),
        low,
        route_job("r-refused"),
        route_job("r-lost"),
        route_job("r-escalates", unsure=None),
        {**verified_job("v-agree", agree, model=CHECKER, stakes="high"),
         "questions": VERIFY_QUESTIONS},
        {**verified_job("v-disagree", disagree, model=CHECKER), "questions": VERIFY_QUESTIONS},
        {**verified_job("v-refused", agree, model=CHECKER), "questions": VERIFY_QUESTIONS},
        sift_job("s-floor", items(4), question={"instructions": QUESTION,
                                                  "escalate_below": 0.99}),
    ]
    refuse = FauxBehaviour(mode="refuse")
    server.provider.override("s-refused/sift.0", FauxBehaviour(
        mode="refuse", refuse_questions=("item.2",)
    ))
    server.provider.override("r-refused/route", refuse)
    server.provider.override("r-escalates/route", refuse)
    server.provider.override("r-lost/route", FauxBehaviour(mode="drop_after_read"))
    server.provider.override("v-refused/verify.0", refuse)
    settings = settings_for(tmp_path, server.url)

    first = run_batch(batch, settings=settings, out_dir=tmp_path / "out1", timeout_s=120)

    expected_calls = {
        **{f"s-parallel/sift.{k}": 1 for k in range(requests_for(230, 100))},
        **{f"s-faux/sift.{k}": 1 for k in range(s1_requests)},
        "s-refused/sift.0": 1,
        **{f"{r}/route": 1 for r in ("r-chosen", "r-low", "r-refused", "r-lost", "r-escalates")},
        "v-agree/decide": 1, "v-agree/verify.0": 1, "v-agree/verify.1": 1,
        "v-disagree/decide": 1, "v-disagree/verify.0": 1,
        "v-refused/decide": 1, "v-refused/verify.0": 1,
        "s-floor/sift.0": 1,
    }
    calls = server.provider.calls()
    assert calls == expected_calls
    assert first.requests_sent == sum(expected_calls.values())
    got = replies(tmp_path / "out1")
    assert set(got) == {j["id"] for j in batch}

    # --- sift: per item, the faux's own p(yes); keep is p >= 0.5; shares sum to the cost.
    for job_id, n, model in (("s-parallel", 230, "parallel-fast"), ("s-faux", 520, "faux-1")):
        reply = got[job_id]
        assert isinstance(reply, ResultMessage) and reply.items is not None
        job_items = next(j for j in batch if j["id"] == job_id)["items"]
        assert [i.index for i in reply.items] == list(range(n))
        for item in reply.items:
            p = faux_noul(model, wire_item(QUESTION, job_items[item.index]), STATE)
            assert item.status == "decided" and item.probability == pytest.approx(p)
            assert item.keep is (p >= 0.5)
        assert reply.value == [i.index for i in reply.items if i.keep]
        per_step = Counter(i.step for i in reply.items)
        for receipt in reply.receipts:
            shares = [i.cost_share_usd for i in reply.items if i.step == receipt.step]
            assert receipt.cost_usd is not None and len(shares) == per_step[receipt.step]
            assert sum(s or 0 for s in shares) == pytest.approx(receipt.cost_usd, rel=1e-6)
    parallel = got["s-parallel"]
    assert isinstance(parallel, ResultMessage) and parallel.items is not None
    assert sorted(Counter(i.step for i in parallel.items).values()) == [30, 100, 100]
    assert {r.cost_usd for r in parallel.receipts} == {settings.parallel_list_price_usd}
    faux_sift = got["s-faux"]
    assert isinstance(faux_sift, ResultMessage) and faux_sift.items is not None
    sizes = Counter(i.step for i in faux_sift.items)
    assert all(capacity[0] <= sizes[f"sift.{k}"] <= capacity[1] for k in range(s1_requests - 1))

    refused = got["s-refused"]
    assert isinstance(refused, EscalationMessage) and refused.reason == "decision_refused"
    assert refused.items is not None
    assert [(i.index, i.status, i.keep) for i in refused.items if i.status != "decided"] == [
        (2, "refused", None)
    ]
    assert set(refused.answers or {}) == {"item.0", "item.1", "item.3", "item.4"}
    assert "item.2" in refused.context["questions"]

    # --- route: chosen, or the unsure route with the reason; without one, an escalation.
    chosen = got["r-chosen"]
    assert isinstance(chosen, ResultMessage) and chosen.route_reason == "chosen"
    assert chosen.value == route_answer(route_job("r-chosen")["state"])["choice"]
    for job_id, why in (("r-low", "low_confidence"), ("r-refused", "refused")):
        reply = got[job_id]
        assert isinstance(reply, ResultMessage), job_id
        assert (reply.value, reply.route_reason) == ("human", why)
    # A lost call (read timeout after sending) escalates for a person even with ``unsure``.
    lost = got["r-lost"]
    assert isinstance(lost, EscalationMessage) and lost.reason == "decision_interrupted"
    assert [r.status for r in lost.receipts] == ["unknown"]
    assert lost.context["questions"]["route"]["criteria"] == route_job("x")["routes"]
    escalated = got["r-escalates"]
    assert isinstance(escalated, EscalationMessage) and escalated.reason == "decision_refused"
    assert escalated.context["questions"]["route"]["criteria"] == route_job("x")["routes"]

    # --- verify: agreement with every receipt; disagreement names the questions.
    agreed = got["v-agree"]
    assert isinstance(agreed, ResultMessage) and agreed.verifications is not None
    assert [r.step for r in agreed.receipts] == ["decide", "verify.0", "verify.1"]
    assert [(v.model, v.agrees) for v in agreed.verifications] == [(CHECKER, True)] * 2
    failed = got["v-disagree"]
    assert isinstance(failed, EscalationMessage) and failed.reason == "verification_failed"
    assert failed.verifications is not None and len(failed.verifications) == 1
    differ = sorted(q for q, same in agreement(disagree).items() if not same)
    assert failed.verifications[0].disagreements == differ
    assert failed.verifications[0].answers is not None and failed.answers is not None
    assert [r.step for r in failed.receipts] == ["decide", "verify.0"]

    checker_refused = got["v-refused"]
    assert isinstance(checker_refused, EscalationMessage)
    assert checker_refused.reason == "decision_refused" and checker_refused.verifications
    assert [(v.status, v.agrees) for v in checker_refused.verifications] == [("answered", None)]
    floored = got["s-floor"]
    assert isinstance(floored, EscalationMessage) and floored.reason == "low_confidence"
    assert floored.items is not None and all(i.status == "decided" for i in floored.items)
    assert floored.context["questions"]["item.0"]["escalate_below"] == 0.99

    # --- run again: everything replays from the ledger, nothing reaches the faux.
    second = run_batch(batch, settings=settings, out_dir=tmp_path / "out2", timeout_s=120)
    assert server.provider.calls() == expected_calls
    assert second.requests_sent == 0
    for name in ("results", "escalations"):
        again = (tmp_path / "out2" / f"{name}.jsonl").read_text()
        assert again == (tmp_path / "out1" / f"{name}.jsonl").read_text()
