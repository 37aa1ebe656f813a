"""The reaper: claimed calls whose lease ran out belong to a worker that died mid-call.

It books each one ``unknown`` and escalates its job ``decision_interrupted``, by running the
job through the runner again, which settles an expired claim without sending. So a job whose
worker died is reported even if its message was lost with the broker. Several reapers in a
fleet are safe: expiring is a conditional update and the first terminal message wins.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime

import structlog

from worker.ledger import Ledger
from worker.runner import Runner

__all__ = ["ReaperThread", "reap_once"]

log = structlog.get_logger("decisions.reaper")


async def reap_once(ledger: Ledger, runner: Runner, *, now: datetime | None = None) -> int:
    """Settle every expired claim; returns how many jobs were escalated."""
    expired = await asyncio.to_thread(ledger.expired_claims, now or datetime.now(UTC))
    settled = 0
    for call in expired:
        row = await asyncio.to_thread(ledger.get_job, call.job_id)
        if row is None or row.terminal_message is not None:
            continue
        await runner.run_one(json.loads(row.job_json))
        settled += 1
        log.warning("reaper.escalated", job_id=call.job_id, step=call.step, provider=call.provider)
    return settled


class ReaperThread(threading.Thread):
    """Runs ``reap_once`` every ``interval_s`` on the process's loop until stopped."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="decisions-reaper", daemon=True)
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        from worker import context

        while not self._stop_event.wait(self.interval_s):
            try:
                ctx = context.current()
                ctx.loop.run(reap_once(ctx.ledger, ctx.runner))
            except Exception as exc:  # a ledger outage: try again next round
                log.warning("reaper.failed", error=type(exc).__name__)

    def stop(self) -> None:
        self._stop_event.set()
