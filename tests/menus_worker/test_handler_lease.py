"""A menu handler runs under its call's lease (``worker.delivery.leased``): the reaper never
escalates a
live one, a handler raising ``SystemExit`` or ``KeyboardInterrupt`` is a handler error, and a
handler whose claim is lost (or whose lease cannot be renewed in time) takes its process down
before anyone else can act on the job."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.replies import EscalationMessage, ResultMessage
from tests.menus_worker import liveness_handlers  # noqa: F401 - registers the t_live_* handlers
from tests.menus_worker.support import OPTIONS, Harness, menu_job
from worker.delivery import leased
from worker.ledger.models import calls
from worker.process import liveness
from worker.recovery.reaper import reap_once

SLOW = [*OPTIONS, {"kind": "handler", "name": "pay", "handler": "t_live_slow"}]


def slow_harness(tmp_path: Path) -> Harness:
    return Harness.create(tmp_path, lease_margin_s=0.5)


async def reap_until(harness: Harness, done: asyncio.Event) -> int:
    """A reaper running every 0.25 s while the job runs, as a fleet's reapers do."""
    escalated = 0
    while not done.is_set():
        escalated += await reap_once(harness.ledger, harness.runner)
        await asyncio.sleep(0.25)
    return escalated


async def test_a_handler_outliving_its_first_lease_is_never_escalated(tmp_path: Path) -> None:
    # Deadline 1 s, margin 0.5 s: the claim's first lease ends at 1.5 s; the handler takes 6.5
    # (more than one renewal period). On the landed code the reaper escalated the job
    # handler_interrupted at 1.5 s and the handler refunded at 6.5 s: both acted.
    harness = slow_harness(tmp_path)
    job = menu_job("lease-slow", options=SLOW, timeout_s=1.0)
    harness.pick("lease-slow", "pick.0", "pay", {"order_id": "A-9", "seconds": 6.5})
    done = asyncio.Event()

    async def run() -> str:
        try:
            return await harness.run(job)
        finally:
            done.set()

    outcome, escalated = await asyncio.gather(run(), reap_until(harness, done))
    assert escalated == 0
    assert outcome == "result"
    reply = harness.terminal("lease-slow")
    assert isinstance(reply, ResultMessage)
    assert reply.value == {"refunded": "A-9", "after_s": 6.5}
    [call] = [c for c in harness.ledger.calls("lease-slow") if c.step == "handler"]
    assert call.status == "answered"


@pytest.mark.parametrize(
    ("handler", "args", "raised"),
    [
        ("t_live_exit", {"code": 3}, "SystemExit"),
        ("t_live_interrupt", {"reason": "^C"}, "KeyboardInterrupt"),
    ],
)
async def test_a_handler_raising_a_base_exception_is_a_handler_error(
    tmp_path: Path, handler: str, args: dict[str, Any], raised: str
) -> None:
    harness = Harness.create(tmp_path)
    options = [*OPTIONS, {"kind": "handler", "name": "bye", "handler": handler}]
    harness.pick("lease-exit", "pick.0", "bye", args)
    outcome = await harness.run(menu_job("lease-exit", options=options))
    assert outcome == "escalation"
    reply = harness.terminal("lease-exit")
    assert isinstance(reply, EscalationMessage) and reply.reason == "handler_failed"
    assert raised in reply.detail
    [call] = [c for c in harness.ledger.calls("lease-exit") if c.step == "handler"]
    assert call.status == "failed"
    # The loop that ran it goes on: another job runs to its result.
    harness.pick("lease-after", "pick.0", "close")
    assert await harness.run(menu_job("lease-after")) == "result"


class Fenced(BaseException):  # as the exit would, nothing of the run goes on
    pass


class FenceLog(list[tuple[str, str, float]]):
    """``liveness.fatal``'s calls; ``over`` lets go the handler threads it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.over = threading.Event()


@pytest.fixture
def fence(monkeypatch: pytest.MonkeyPatch) -> Iterator[FenceLog]:
    """``liveness.fatal`` recorded (and the run stopped) instead of the process ending.

    Called from a handler's own thread (its fence, ``worker.delivery.leased._Fence``), it
    blocks that thread until the test is over, as the real exit would for good. Handler
    threads still running then are let go and waited for while the stub is in place: one
    waking later would meet the real exit in another test."""
    seen = FenceLog()

    def fatal(name: str, why: str) -> None:
        seen.append((name, why, time.monotonic()))
        if threading.current_thread() is not threading.main_thread():
            seen.over.wait()
        raise Fenced(why)

    monkeypatch.setattr(liveness, "fatal", fatal)
    yield seen
    seen.over.set()
    for thread in threading.enumerate():
        if thread.name.startswith("handler-"):
            thread.join(timeout=15)


async def test_a_handler_whose_claim_is_taken_ends_its_process(
    tmp_path: Path, fence: list[tuple[str, str, float]]
) -> None:
    harness = slow_harness(tmp_path)
    harness.pick("lease-taken", "pick.0", "pay", {"order_id": "B-1", "seconds": 4.0})
    task = asyncio.ensure_future(harness.run(menu_job("lease-taken", options=SLOW)))
    await asyncio.sleep(0.5)
    # Someone booked the running call unknown (a reaper judging by a wrong clock, say).
    with harness.ledger.engine.begin() as conn:
        conn.execute(
            sa.update(calls)
            .where((calls.c.job_id == "lease-taken") & (calls.c.step == "handler"))
            .values(status="unknown")
        )
    with pytest.raises(Fenced):
        await task
    [(name, why, _)] = fence
    assert name == "handler-lease" and "claim taken" in why


async def test_a_lease_that_cannot_be_renewed_ends_the_process_before_it_runs_out(
    tmp_path: Path, fence: list[tuple[str, str, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = slow_harness(tmp_path)
    harness.pick("lease-dark", "pick.0", "pay", {"order_id": "C-1", "seconds": 8.0})
    renewals: list[float] = []
    real = harness.ledger.renew_lease

    def renew(**kwargs: Any) -> bool:
        renewals.append(time.monotonic())
        if len(renewals) == 1:
            return real(**kwargs)
        time.sleep(6)  # the ledger stopped answering (longer than the fence)
        return True

    monkeypatch.setattr(harness.ledger, "renew_lease", renew)
    with pytest.raises(Fenced):
        await harness.run(menu_job("lease-dark", options=SLOW))
    [(_, why, at)] = fence
    assert "could not be renewed" in why
    extension = leased.MIN_EXTENSION_S
    # Before the lease the first renewal gave ends (the database saw it after it was sent).
    assert at - renewals[0] < extension
    [call] = [c for c in harness.ledger.calls("lease-dark") if c.step == "handler"]
    assert call.status == "claimed"
    assert json.dumps(call.lease_expires.isoformat())  # still held: nobody escalated it


async def test_a_handler_frozen_past_its_lease_cannot_act_when_it_wakes(
    tmp_path: Path, fence: FenceLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: a worker frozen mid-handler (SIGSTOP, as a VM freeze or a swap
    storm looks) past its lease, while another worker's reaper escalated the job
    handler_interrupted; on SIGCONT the handler's thread ran before the loop's fence could
    and refunded 0.06 s after the escalation went out. Here the loop is frozen instead of the
    whole process (the same race: nothing renews and nothing fences while the handler's
    wait ends). The handler must not act once the lease it knows it holds is over, not even
    from an ``except BaseException`` (a fence that raised let it: found by a second attack)."""
    runs = tmp_path / "runs.jsonl"
    monkeypatch.setenv("MENUS_TEST_RUNS", str(runs))
    harness = Harness.create(tmp_path, lease_margin_s=0.5)
    stubborn = [*OPTIONS, {"kind": "handler", "name": "pay", "handler": "t_live_stubborn"}]
    harness.pick("lease-frozen", "pick.0", "pay", {"order_id": "D-1", "seconds": 6.0})
    frozen = leased.MIN_EXTENSION_S + 3  # past the lease the first renewal gave
    asyncio.get_running_loop().call_later(0.5, time.sleep, frozen)
    run = asyncio.ensure_future(harness.run(menu_job("lease-frozen", options=stubborn)))
    for _ in range(200):
        if fence:
            break
        await asyncio.sleep(0.1)
    # The process ends from the handler's own thread, before its next call.
    name, why, _ = fence[0]
    assert name == "handler-lease" and "outlived its lease" in why
    assert not runs.exists() or "D-1" not in runs.read_text()
    # Where the process would be gone, the stubbed exit lets the handler's thread go (it
    # raises), so that the run ends: the loop renews a lease it still holds meanwhile, and
    # waits for its handler, however long, even when cancelled.
    fence.over.set()
    with contextlib.suppress(Exception, Fenced):
        await asyncio.wait_for(run, 30)
