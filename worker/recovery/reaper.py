"""The reaper: claimed calls whose lease ran out belong to a worker that died mid-call.

It books each one ``unknown`` and escalates its job ``decision_interrupted``, by running the
job through the runner again, which settles an expired claim without sending. So a job whose
worker died is reported even if its message was lost with the broker. Several reapers in a
fleet are safe: expiring is a conditional update and the first terminal message wins. A job
whose stored body no longer reads as a job (``reaper.unreadable_job``) is not run (that would
publish a ``rejected`` for a call that may have been sent): its claim is booked ``unknown``
and the job escalated ``decision_interrupted`` from what its row says
(``JobLifecycle.end_unreadable``). It used to be left claimed for good, logged each round,
without a terminal message and with its budget reservation held.

It also relays the outbox: a finished job whose stored message is still unpublished a while
after it was stored had its publish fail (the streams' Redis full, say) after its task gave
up. The relay publishes the stored message as it stands in the ledger (``Outbox.publish``,
the path a redelivery's replay takes; publish-once makes a late relay of a message that did
go out a no-op) and sends nothing. It used to run the job again for that, which read its
body: a body that no longer read as a job (damaged, or of an older shape) stopped the relay,
or published a ``rejected`` in place of the stored message. A row it cannot publish is
logged and skipped, and the rest go, page after page.

Each round's steps (reap, relay, recovery of lost intake) run on their own: one that fails is
logged and the others still run.

And it stores reviewers' labels (``store_labels``): a resolution leaves them on the label
stream, since a reviewer's process may have no ledger.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import redis
import structlog

from shared.errors import PublishFailed
from shared.job_parsing import stored_job
from shared.streams import RedisPublisher
from worker.calibration.intake import store_label_stream
from worker.kinds.dispatch import Runner
from worker.ledger import JobRow, Ledger, LedgerUnavailable
from worker.ledger.outbox_rows import OUTBOX_GRACE_S, UnreadableJob
from worker.recovery.intake import Recovery

if TYPE_CHECKING:
    from worker.process.context import WorkerContext

__all__ = [
    "OUTBOX_GRACE_S",
    "OUTBOX_PAGE",
    "ReaperThread",
    "reap_once",
    "relay_outbox",
    "store_labels",
]

log = structlog.get_logger("decisions.reaper")

#: Outbox rows read at a time. A round reads page after page, so rows that keep failing (a
#: stream that refuses them) never hold back the rows behind them.
OUTBOX_PAGE = 1000

#: A server away (the ledger, the streams' Redis): every other row would fail the same way,
#: so the step ends here and the next round tries again.
_AWAY = (LedgerUnavailable, redis.ConnectionError, redis.TimeoutError)


async def reap_once(ledger: Ledger, runner: Runner, *, now: datetime | None = None) -> int:
    """Settle every expired claim; returns how many jobs were escalated."""
    # The ledger's clock judges the leases (``now`` only for a test's own clock).
    expired = await asyncio.to_thread(ledger.expired_claims, now)
    settled = 0
    for call in expired:
        where = {"job_id": call.job_id, "step": call.step, "provider": call.provider}
        try:
            row = await asyncio.to_thread(ledger.get_job, call.job_id)
            if row is None:
                continue
            if row.terminal_message is not None:
                # A claim committed onto a job already finished (found by an attack: a worker
                # frozen inside its group commit, while another delivery, not seeing the
                # claim, ended the job): it would stay claimed for good, its reservation
                # held. It may have been sent; the job's one message is out already, so it
                # is booked unknown, at an unknown cost (no plan is made again for a
                # finished job), and nothing is published.
                await asyncio.to_thread(ledger.expire_claim, job_id=call.job_id, step=call.step)
                log.warning("reaper.stray_claim_closed", **where)
                continue
            raw = stored_job(row.job_json)
            if raw is None:
                # Its id only: the body is a producer's data, and unreadable anyway.
                log.error("reaper.unreadable_job", **where)
                # The job's message first, then the claim: the other order lost the job for
                # good when the process or the ledger went between the two (found by an
                # attack: a booked claim is never listed again); this one leaves a claim on
                # a finished job, which the next round books as the stray claim above.
                outcome = await runner.delivery.end_unreadable(row)
                await asyncio.to_thread(ledger.expire_claim, job_id=call.job_id, step=call.step)
            else:
                outcome = await runner.run_one(raw)
        except _AWAY:
            raise
        except Exception as exc:  # this job alone: the other claims are settled all the same
            log.error("reaper.settle_failed", error=type(exc).__name__, **where)
            continue
        if outcome == "rejected":  # read as a job here, refused by its kind (its plan)
            log.error("reaper.unsettled", **where)
            continue
        settled += 1
        log.warning("reaper.escalated", **where)
    return settled


async def relay_outbox(
    ledger: Ledger,
    runner: Runner,
    *,
    now: datetime | None = None,
    page_size: int = OUTBOX_PAGE,
) -> int:
    """Publish finished jobs' messages left unpublished; returns how many were relayed."""
    # Compared with ``finished_at``, which the ledger's clock stamped.
    moment = now if now is not None else await asyncio.to_thread(ledger.now)
    cutoff = moment - timedelta(seconds=OUTBOX_GRACE_S)
    relayed = 0
    after: tuple[datetime, str] | None = None
    while True:
        page = await asyncio.to_thread(ledger.unpublished, page_size, after=after)
        last = None
        for row in page:
            if isinstance(row, UnreadableJob):
                log.error("reaper.relay_unreadable", job_id=row.job_id, column=row.column)
                continue
            if row.finished_at is None or row.finished_at > cutoff:
                # Oldest first: the rest are fresher still, their own delivery's to publish.
                return relayed
            if await _relay_one(ledger, runner, row):
                relayed += 1
            last = (row.finished_at, row.job_id)
        if len(page) < page_size or last is None or (after is not None and last <= after):
            # The last page; or a page of rows that cannot be read at all, after which no
            # next page can be asked for (each was logged); or one that did not move on (a
            # time stamp SQLite kept in another format sorts apart from its value).
            return relayed
        after = last


async def _relay_one(ledger: Ledger, runner: Runner, row: JobRow) -> bool:
    """Publish one row's stored message; False when it was not (logged)."""
    try:
        # Read again just before publishing, as a redelivery's replay does: a job published
        # meanwhile, or reopened by ``decisions budget resume``, is left as it now is.
        current = await asyncio.to_thread(ledger.get_job, row.job_id)
        if current is None or not current.finished or current.published_at is not None:
            return False
        # To the stream the job was first delivered for (the one its body names too).
        await runner.delivery.publish(current, current.reply_to)
    except PublishFailed:
        # Refused for this stream only (a key that is not a stream, say; logged where it
        # failed): the next rows are relayed all the same, this one again next round.
        return False
    except _AWAY:
        raise
    except Exception as exc:  # this row alone: the others are relayed all the same
        log.error("reaper.relay_failed", job_id=row.job_id, error=type(exc).__name__)
        return False
    log.warning("reaper.relayed", job_id=row.job_id, outcome=current.terminal_type)
    return True


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
    """Runs a round (reap, relay, recover intake, store labels) every ``interval_s`` on the
    process's loop until stopped."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="decisions-reaper", daemon=True)
        self.interval_s = interval_s
        self._stop_event = threading.Event()
        self._recovery: Recovery | None = None

    def run(self) -> None:
        from worker.process import context, liveness

        # A reaper that died leaves expired claims and lost jobs to no one: that is fatal.
        with liveness.vital(self.name, stopping=self._stop_event.is_set):
            while not self._stop_event.wait(self.interval_s):
                try:
                    ctx = context.current()
                except Exception as exc:  # the ledger's schema read, say: next round
                    log.warning("reaper.failed", step="context", error=type(exc).__name__)
                else:
                    self._round(ctx)
                store_labels()

    def _round(self, ctx: WorkerContext) -> None:
        steps: tuple[tuple[str, Callable[[], object]], ...] = (
            ("reap", lambda: ctx.loop.run(reap_once(ctx.ledger, ctx.runner))),
            ("relay", lambda: ctx.loop.run(relay_outbox(ctx.ledger, ctx.runner))),
            ("recovery", lambda: self._recover(ctx)),
        )
        # Each step on its own: one that fails (a row it trips over, a server away) must not
        # skip the others, which may well be able to do theirs.
        for name, work in steps:
            try:
                work()
            except Exception as exc:  # a ledger outage, say: this step again next round
                log.warning("reaper.failed", step=name, error=type(exc).__name__)

    def _recover(self, ctx: WorkerContext) -> None:
        """Jobs the broker lost before any worker saw them (``worker.recovery.intake``)."""
        self._recovery = self._recovery or Recovery.from_settings(ctx.settings)
        if self._recovery is not None:
            ctx.loop.run(self._recovery.run_once(ctx.ledger))

    def stop(self) -> None:
        self._stop_event.set()

