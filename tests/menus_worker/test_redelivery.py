"""A menu job redelivered at every step boundary: at most one model call and one handler run
per step, counted at the faux (per ``X-Decisions-Call``) and in the handlers themselves.

Two ways to leave a step half done: the run dies at a boundary (``crash_then_run``: the
state is whatever the real code had committed), or the ledger is written directly (a step
claimed and left, as a worker that died right after its claim leaves it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.replies import EscalationMessage, ResultMessage
from tests.menus_worker import handlers
from tests.menus_worker.support import Crash, Harness, menu_job
from worker.kinds.menus import HANDLER_PROVIDER
from worker.testing.faux import FauxChatReply, FauxToolCall

REFUND = {"order_id": "A-1", "amount": 5}


def plain(harness: Harness, job_id: str) -> dict[str, Any]:
    harness.pick(job_id, "pick.0", "refund", REFUND)
    return menu_job(job_id)


def retried(harness: Harness, job_id: str) -> dict[str, Any]:
    harness.reply(job_id, "pick.0", FauxChatReply(content="hmm, a refund?"))
    harness.pick(job_id, "pick.1", "refund", REFUND)
    return menu_job(job_id)


def working(harness: Harness, job_id: str) -> dict[str, Any]:
    call = FauxToolCall(name="t_lookup", arguments={"order_id": "A-1"})
    harness.reply(job_id, "turn.0", FauxChatReply(tool_calls=[call]))
    harness.pick(job_id, "turn.1", "refund", REFUND)
    return menu_job(job_id, work={"tools": ["t_lookup"], "max_steps": 3})


JOBS = {"plain": plain, "retried": retried, "working": working}
STEPS = {
    "plain": ["pick.0", "handler"],
    "retried": ["pick.0", "pick.1", "handler"],
    "working": ["turn.0", "tool.0", "turn.1", "handler"],
}
MODEL_STEPS = {"pick.0", "pick.1", "turn.0", "turn.1"}


def boundaries() -> list[tuple[str, str, str]]:
    out = []
    for kind, steps in STEPS.items():
        for step in steps:
            for point in ("after_claim", "after_response", "after_record"):
                out.append((kind, step, point))
    return out


def expected(kind: str, step: str, point: str) -> tuple[str, str | None]:
    """The terminal message a redelivery after dying at ``(step, point)`` must end with."""
    if point == "after_record":
        return "result", None
    if step in MODEL_STEPS:
        return "escalation", "decision_interrupted"
    return "escalation", "handler_interrupted"


@pytest.mark.parametrize(("kind", "step", "point"), boundaries())
async def test_redelivery_at_each_boundary(
    harness: Harness, kind: str, step: str, point: str
) -> None:
    job = JOBS[kind](harness, f"{kind}-{step}-{point}")
    job_id = job["id"]
    outcome = await harness.crash_then_run(job, point, step)
    want_type, want_reason = expected(kind, step, point)
    message = harness.terminal(job_id)
    assert (outcome, getattr(message, "reason", None)) == (want_type, want_reason)

    # Never more than one request per model step, nor one run per tool or handler.
    calls = harness.model_calls(job_id)
    assert set(calls.values()) <= {1}, calls
    runs = [n for n, args in handlers.RUNS]
    assert runs.count("t_refund") <= 1 and runs.count("t_lookup") <= 1, runs
    steps = STEPS[kind]
    done = steps[: steps.index(step) + 1]
    for model_step in MODEL_STEPS & set(steps):
        sent = calls.get(model_step, 0)
        if model_step not in done:
            # A step after the crash is only made if the redelivery could go on.
            assert sent == (1 if want_type == "result" else 0), (model_step, calls)
        elif model_step == step and point == "after_claim":
            assert sent == 0  # claimed, then the worker died before sending: never sent
        else:
            assert sent == 1
    handler_runs = runs.count("t_refund")
    if step == "handler":
        assert handler_runs == (0 if point == "after_claim" else 1)
    else:
        assert handler_runs == (1 if want_type == "result" else 0)

    # A third delivery changes nothing: the stored terminal message is published again.
    before = (dict(calls), list(handlers.RUNS))
    assert await harness.run(job) == want_type
    assert (harness.model_calls(job_id), handlers.RUNS) == before
    assert len(harness.published(job_id)) == 1


async def test_redelivered_after_the_deadline_a_stored_pick_stands_and_nothing_new_runs(
    harness: Harness,
) -> None:
    job = plain(harness, "late-handler")
    harness.crash_at = ("after_record", "pick.0")
    with pytest.raises(Crash):
        await harness.run(job)
    harness.pass_deadline("late-handler")
    assert await harness.run(job) == "escalation"
    message = harness.terminal("late-handler")
    assert isinstance(message, EscalationMessage)
    assert message.reason == "deadline_exceeded"
    assert message.detail == "the deadline passed before handler; t_refund was not run"
    assert [(r.step, r.replayed) for r in message.receipts] == [("pick.0", True)]
    assert harness.model_calls("late-handler") == {"pick.0": 1} and handlers.RUNS == []


async def test_a_model_call_claimed_and_left_escalates_decision_interrupted(
    harness: Harness,
) -> None:
    job = plain(harness, "left-pick")
    await open_row(harness, job)
    claim_and_leave(harness, "left-pick", "pick.0", provider="faux")
    assert await harness.run(job) == "escalation"
    message = harness.terminal("left-pick")
    assert isinstance(message, EscalationMessage)
    assert message.reason == "decision_interrupted"
    assert "pick.0" in message.detail
    assert harness.faux.total() == 0 and handlers.RUNS == []
    assert harness.call_statuses("left-pick") == {"pick.0": "unknown"}


async def test_a_handler_claimed_and_left_escalates_handler_interrupted(harness: Harness) -> None:
    job = plain(harness, "left-handler")
    harness.crash_at = ("after_record", "pick.0")
    with pytest.raises(Crash):
        await harness.run(job)
    claim_and_leave(harness, "left-handler", "handler", provider=HANDLER_PROVIDER)
    assert await harness.run(job) == "escalation"
    message = harness.terminal("left-handler")
    assert isinstance(message, EscalationMessage)
    assert message.reason == "handler_interrupted"
    assert message.context["menu"] and message.context["options"]
    assert harness.model_calls("left-handler") == {"pick.0": 1}  # replayed, not asked again
    assert handlers.RUNS == []
    assert [r.step for r in message.receipts] == ["pick.0", "handler"]
    assert all(r.replayed for r in message.receipts)


async def test_a_live_duplicate_waits_and_publishes_the_other_delivery_s_outcome(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import worker.delivery.calls as delivery_calls

    monkeypatch.setattr(delivery_calls, "CLAIM_POLL_S", 0.01)
    job = plain(harness, "dup")
    await open_row(harness, job)
    # Another delivery holds pick.0 with its lease running...
    claim_and_leave(harness, "dup", "pick.0", provider="faux", lease_s=60)
    waiting = asyncio.create_task(harness.run(job))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    # ... and finishes the job while this one waits.
    message = ResultMessage(job_id="dup", kind="menu", value="theirs")
    harness.ledger.finish_job(
        job_id="dup", message_type="result", reason=None, message_json=message.to_json()
    )
    assert await asyncio.wait_for(waiting, 5) == "result"
    published = harness.terminal("dup")
    assert isinstance(published, ResultMessage) and published.value == "theirs"
    assert harness.faux.total() == 0 and handlers.RUNS == []


async def open_row(harness: Harness, job: dict[str, Any]) -> None:
    from shared.job_parsing import parse_job
    from shared.jobs import MenuJob

    parsed = parse_job(job)
    assert isinstance(parsed, MenuJob)
    delivery = harness.runner.delivery
    await delivery.ledger.open_job(job=delivery.open_args(parsed))


def claim_and_leave(
    harness: Harness, job_id: str, step: str, *, provider: str, lease_s: float = -1
) -> None:
    claim = harness.ledger.claim(
        job_id=job_id,
        step=step,
        provider=provider,
        model=None,
        request_sha256=None,
        lease_expires=datetime.now(UTC) + timedelta(seconds=lease_s),
    )
    assert claim.fresh
