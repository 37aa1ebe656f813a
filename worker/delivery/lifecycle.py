"""A job's lifecycle: validate ─▶ open (or replay) ─▶ finish (the outbox) ─▶ publish once.

- ``validate``: a job that does not parse, or that its kind cannot plan, is ``rejected``
  naming each field, with nothing sent.
- ``open``: the job's row is inserted or read back. A job submitted before with other
  content is rejected (``id``); one finished before is replayed: its stored message is
  published again, nothing is sent.
- ``finish``: the terminal message is stored with the last call's outcome in one
  transaction (first wins), then published once by ``Outbox``.

Deadlines are absolute and fixed at the first delivery: the stored row's counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import structlog

from shared.errors import FieldProblem, JobConflict, JobInvalid
from shared.fingerprint import job_fingerprint
from shared.job_parsing import job_deadline, parse_job, stored_job
from shared.jobs import AnyJob
from shared.judgments.contexts import escalation_context
from shared.limits import MAX_ID_CHARS
from shared.replies import EscalationMessage, TerminalMessage
from shared.settings import Settings
from worker.delivery.ledger_io import LedgerIO
from worker.delivery.outbox import Outbox
from worker.delivery.records import stored_receipt
from worker.kinds.image_store import has_refs, resolve_refs
from worker.ledger import CallOutcome, JobRow
from worker.observability.observer import Observer
from worker.process.faults import fault_point

__all__ = ["JobLifecycle", "TerminalMessage"]

log = structlog.get_logger("decisions.delivery")


P = TypeVar("P")


class JobLifecycle:
    """Validate, open, replay, finish and publish jobs, for every job kind."""

    settings: Settings
    ledger: LedgerIO
    outbox: Outbox
    observer: Observer

    async def hold_through_outage(self, write: Callable[[], Awaitable[P]], operation: str) -> P:
        raise NotImplementedError  # CallProtocol's

    def deadline(self, job: AnyJob) -> datetime:
        """The job's absolute deadline, from the ledger's clock (never a producer's)."""
        return job_deadline(
            job,
            default_s=self.settings.default_timeout_s,
            ceiling_s=self.settings.deadline_ceiling_s,
            now=self.ledger.now(),
        )

    def open_args(self, job: AnyJob, deadline: datetime | None = None) -> dict[str, Any]:
        return {
            "job_id": job.id,
            "kind": job.kind,
            "batch": job.batch,
            "reply_to": job.reply_to,
            "fingerprint": job_fingerprint(job),
            "deadline": deadline or self.deadline(job),
            "job_json": job.model_dump_json(),
        }

    async def validate(self, raw: Any, plan: Callable[[AnyJob], P]) -> tuple[AnyJob, P] | str:
        """The job and its kind's plan; or, for a job that is not valid, ``"rejected"``
        (its message published, naming each field)."""
        try:
            job = parse_job(raw)
            if not has_refs(job):
                return job, _planned(job, plan)
            # Image refs are fetched (from the allowlisted stores only) for the plan, by the
            # job's deadline; the job, its row and its fingerprint keep the refs.
            left = (self.deadline(job) - self.ledger.now()).total_seconds()
            try:
                fetched = await resolve_refs(job, self.settings, timeout_s=left)
            except JobInvalid as exc:
                return await self.refs_not_fetched(raw, job, exc.problems)
            return job, _planned(fetched, plan)
        except JobInvalid as exc:
            held = await self._held(raw)
            if held is not None:
                return await self._held_but_refused(held)
            return await self.outbox.reject(raw, exc.problems)

    async def _held(self, raw: Any) -> JobRow | None:
        """The ledger's row of this job when an earlier delivery opened it and its stored body
        no longer reads as a job either, else None.

        A body this release refuses (a field of an older shape) may be a job an earlier
        release opened and whose calls may have been sent: a ``rejected`` then is a second
        terminal message beside the one the reaper ends it with (found by an attack), and
        tells the producer to submit again what may have been paid. Judged by the stored
        body, which the earlier release wrote (its model's dump, not the producer's body):
        one that still reads is a job this release runs, and a refused body under its id is
        another producer's, rejected as before, whatever fields it shares (found by an attack
        on a first version that compared the fields: a body of the id alone ended a running
        job). An id no ledger could hold (a lone surrogate, a NUL) is looked up nowhere."""
        job_id = raw.get("id") if isinstance(raw, dict) else None
        if not (isinstance(job_id, str) and 0 < len(job_id) <= MAX_ID_CHARS):
            return None
        if not job_id.isprintable():  # a lone surrogate or a NUL: the lookup itself raised
            return None
        row = await self.ledger.get_job(job_id)
        if row is None or stored_job(row.job_json) is not None:
            return None
        return row

    async def _held_but_refused(self, row: JobRow) -> str:
        """A job the ledger holds whose body this release refuses: its stored message again
        if it has one; else ended as the reaper ends it (``end_unreadable``), unless a call of
        it is still claimed, whose holder or, once its lease ends, the reaper settles it."""
        if row.finished:
            return await self.publish(row, row.reply_to)
        calls = await self.ledger.calls(row.job_id)
        if any(call.status == "claimed" for call in calls):
            log.warning("job.held_unreadable", job_id=row.job_id)
            return "deferred"
        return await self.end_unreadable(row)

    async def refs_not_fetched(self, raw: Any, job: AnyJob, problems: list[FieldProblem]) -> str:
        """A valid job whose image refs cannot be fetched now (a store down or slow, the
        deadline passed): rejected if no delivery opened it, since then nothing was sent.

        A redelivery of a job an earlier delivery opened must not reject it: that job may
        have its terminal message already (replayed here, as ``open`` does) or calls claimed
        and possibly sent; a ``rejected`` would be its second terminal message, and tell the
        producer to submit again what may have been paid for. Without its images it cannot be
        planned, so it escalates ``decision_interrupted`` with what its calls stored, and
        nothing is sent again."""
        row = await self.ledger.get_job(job.id)
        if row is None or row.fingerprint != job_fingerprint(job):
            return await self.outbox.reject(raw, problems)  # another job's id: open's rule
        if row.finished:
            return await self.replay(row, job)
        calls = await self.ledger.calls(job.id)
        if not calls:
            return await self.outbox.reject(raw, problems)  # opened, nothing claimed
        why = "; ".join(f"{p.field}: {p.message}" for p in problems)
        message = EscalationMessage(
            job_id=job.id,
            batch=job.batch,
            metadata=job.metadata,
            receipts=[stored_receipt(call) for call in calls],
            kind=job.kind,
            reason="decision_interrupted",
            detail=(
                f"a redelivery could not fetch the job's images again ({why}); "
                "what its earlier delivery sent is never sent again"
            ),
            context=escalation_context(job),
            reply_to=job.reply_to,
        )
        stored = await self.finish(job, message, None, provider="-")
        return await self.publish(stored, job.reply_to)

    async def end_unreadable(self, row: JobRow) -> str:
        """End a job whose stored body no longer reads as a job (damaged, or of a shape this
        release refuses): an escalation made of what its row says (id, kind, batch, reply
        stream) and its calls' receipts, stored (first wins) and published once. Before, the
        reaper left such a job claimed for good: no terminal message, its reservation held;
        running it would publish a ``rejected`` for a call that may have been sent."""
        calls = await self.ledger.calls(row.job_id)
        # Ended before its claims are booked (the reaper's order: a crash between the two
        # leaves a claim on a finished job, which the next round books): a claim is unknown.
        booked = [replace(c, status="unknown") if c.status == "claimed" else c for c in calls]
        message = EscalationMessage(
            job_id=row.job_id,
            batch=row.batch,
            kind=row.kind,
            receipts=[stored_receipt(call) for call in booked],
            reason="decision_interrupted",
            detail=(
                f"the {row.kind} job's stored body no longer reads as a job; "
                f"its calls ({', '.join(c.step for c in calls) or 'none'}) may have been "
                "sent and are never sent again"
            ),
            reply_to=row.reply_to,
        )
        stored = await self.ledger.finish_job(
            job_id=row.job_id,
            message_type=message.type,
            reason=message.reason,
            message_json=message.to_json(),
            outcome=None,
        )
        return await self.publish(stored, row.reply_to)

    async def open(self, raw: Any, job: AnyJob) -> JobRow | str:
        """The job's open row; or its terminal type, when it was rejected (same id, other
        content) or replayed (finished before: the stored message is published again)."""
        try:
            row = await self.ledger.open_job(job=self.open_args(job))
        except JobConflict as exc:
            return await self.outbox.reject(raw, [FieldProblem("id", str(exc))])
        if row.finished:
            return await self.replay(row, job)
        return row

    async def replay(self, row: JobRow, job: AnyJob) -> str:
        log.info("job.replayed", job_id=job.id, kind=job.kind, outcome=row.terminal_type)
        return await self.outbox.publish(row, job.reply_to)

    async def finish(
        self,
        job: AnyJob,
        message: TerminalMessage,
        outcome: CallOutcome | None,
        *,
        provider: str,
    ) -> JobRow:
        """Store the terminal message (with the last call's outcome, if any) in one
        transaction; the stored row, which may be another delivery's (first wins).
        ``ClaimLost`` if ``outcome``'s call was booked by another delivery meanwhile."""
        reason = getattr(message, "reason", None)

        async def write() -> JobRow:
            return await self.ledger.finish_job(
                job_id=job.id,
                message_type=message.type,
                reason=reason,
                message_json=message.to_json(),
                outcome=outcome,
            )

        if outcome is None:
            row = await write()
        else:
            # The outcome may have been paid for: held through a ledger outage.
            row = await self.hold_through_outage(write, f"finish {job.id}")
        fault_point("after_record", job.id)
        self.observer.job_finished(job.kind, provider, message.type, reason)
        return row

    async def publish(self, row: JobRow, stream: str) -> str:
        return await self.outbox.publish(row, stream)


def _planned(job: AnyJob, plan: Callable[[AnyJob], P]) -> P:
    """``plan(job)``; a plan that fails other than by naming a field (``JobInvalid``) is a
    bug, and still only this job's: it is rejected (nothing was claimed nor sent yet), where
    the error would have ended the whole chunk's task and every job in it without a terminal
    message (a crafted image header did, through Pillow)."""
    try:
        return plan(job)
    except JobInvalid:
        raise
    except Exception as exc:
        log.exception("job.unplannable", job_id=job.id, kind=job.kind)
        why = (
            f"the worker could not plan this job ({type(exc).__name__}); nothing was sent. "
            "This is a bug in decisions: please report it with the worker's log"
        )
        raise JobInvalid([FieldProblem("(job)", why)], job.id) from None
