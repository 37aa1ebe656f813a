"""The reaper: claimed calls whose lease ran out belong to a worker that died mid-call.

It books each one ``unknown`` and escalates its job ``decision_interrupted``, by running the
job through the runner again, which settles an expired claim without sending. So a job whose
worker died is reported even if its message was lost with the broker. Several reapers in a
fleet are safe: expiring is a conditional update and the first terminal message wins.

It also relays the outbox: a finished job whose stored message is still unpublished a while
after it was stored had its publish fail (the streams' Redis full, say) after its task gave
up; running the job again publishes the stored message (publish-once makes a late relay of
a message that did go out a no-op) and sends nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta

import structlog

from worker.ledger import Ledger
from worker.runner import Runner

__all__ = ["OUTBOX_GRACE_S", "ReaperThread", "reap_once", "relay_outbox"]

log = structlog.get_logger("decisions.reaper")

#: How long a stored message may wait for its own delivery to publish it before a relay does.
OUTBOX_GRACE_S = 10.0


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


async def relay_outbox(ledger: Ledger, runner: Runner, *, now: datetime | None = None) -> int:
    """Publish finished jobs' messages left unpublished; returns how many were relayed."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=OUTBOX_GRACE_S)
    rows = await asyncio.to_thread(ledger.unpublished)
    relayed = 0
    for row in rows:
        if row.finished_at is None or row.finished_at > cutoff:
            continue
        await runner.run_one(json.loads(row.job_json))
        relayed += 1
        log.warning("reaper.relayed", job_id=row.job_id, outcome=row.terminal_type)
    return relayed


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
                ctx.loop.run(relay_outbox(ctx.ledger, ctx.runner))
            except Exception as exc:  # a ledger outage: try again next round
                log.warning("reaper.failed", error=type(exc).__name__)

    def stop(self) -> None:
        self._stop_event.set()
