"""The reaper: claimed calls whose lease ran out belong to a worker that died mid-call.

It books each one ``unknown`` and escalates its job ``decision_interrupted``, by running the
job through the runner again, which settles an expired claim without sending. So a job whose
worker died is reported even if its message was lost with the broker. Several reapers in a
fleet are safe: expiring is a conditional update and the first terminal message wins.

It also relays the outbox: a finished job whose stored message is still unpublished a while
after it was stored had its publish fail (the streams' Redis full, say) after its task gave
up; running the job again publishes the stored message (publish-once makes a late relay of
a message that did go out a no-op) and sends nothing.

And it stores reviewers' labels (``store_labels``): a resolution leaves them on the label
stream, since a reviewer's process may have no ledger.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta

import structlog

from shared.errors import PublishFailed
from shared.streams import RedisPublisher
from worker.calibration.intake import store_label_stream
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.recovery.intake import Recovery

__all__ = ["OUTBOX_GRACE_S", "ReaperThread", "reap_once", "relay_outbox", "store_labels"]

log = structlog.get_logger("decisions.reaper")

#: How long a stored message may wait for its own delivery to publish it before a relay does.
OUTBOX_GRACE_S = 10.0


async def reap_once(ledger: Ledger, runner: Runner, *, now: datetime | None = None) -> int:
    """Settle every expired claim; returns how many jobs were escalated."""
    # The ledger's clock judges the leases (``now`` only for a test's own clock).
    expired = await asyncio.to_thread(ledger.expired_claims, now)
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
    # Compared with ``finished_at``, which the ledger's clock stamped.
    moment = now if now is not None else await asyncio.to_thread(ledger.now)
    cutoff = moment - timedelta(seconds=OUTBOX_GRACE_S)
    rows = await asyncio.to_thread(ledger.unpublished)
    relayed = 0
    for row in rows:
        if row.finished_at is None or row.finished_at > cutoff:
            continue
        try:
            await runner.run_one(json.loads(row.job_json))
        except PublishFailed:
            # Refused for this stream only (a key that is not a stream, say; logged where it
            # failed): the next rows are relayed all the same, this one again next round.
            continue
        relayed += 1
        log.warning("reaper.relayed", job_id=row.job_id, outcome=row.terminal_type)
    return relayed


def store_labels() -> int:
    """Reviewers' labels waiting on the label stream, into the ledger (``worker.calibration``);
    0 when the process publishes to memory (an embedded run has no label stream)."""
    from worker.process import context

    try:
        # Inside: the context is built on first use, and building it reads the ledger's
        # schema, so an outage can surface here (a reaper that raised would end the worker).
        ctx = context.current()
        if not isinstance(ctx.sink, RedisPublisher):
            return 0
        return store_label_stream(ctx.ledger, ctx.sink.client)
    except Exception as exc:  # Redis or the ledger away: the labels wait for the next round
        log.warning("reaper.labels_failed", error=type(exc).__name__)
        return 0


class ReaperThread(threading.Thread):
    """Runs ``reap_once`` every ``interval_s`` on the process's loop until stopped."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="decisions-reaper", daemon=True)
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        from worker.process import context, liveness

        # A reaper that died leaves expired claims and lost jobs to no one: that is fatal.
        with liveness.vital(self.name, stopping=self._stop_event.is_set):
            recovery: Recovery | None = None
            while not self._stop_event.wait(self.interval_s):
                try:
                    ctx = context.current()
                    ctx.loop.run(reap_once(ctx.ledger, ctx.runner))
                    ctx.loop.run(relay_outbox(ctx.ledger, ctx.runner))
                    # Jobs the broker lost before any worker saw them (worker.recovery.intake).
                    recovery = recovery or Recovery.from_settings(ctx.settings)
                    if recovery is not None:
                        ctx.loop.run(recovery.run_once(ctx.ledger))
                except Exception as exc:  # a ledger outage: try again next round
                    log.warning("reaper.failed", error=type(exc).__name__)
                store_labels()

    def stop(self) -> None:
        self._stop_event.set()
