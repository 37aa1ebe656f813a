"""The at-most-once cycle of one call: claim ─▶ send ─▶ record; or await / settle another's.

- ``claim``: committed before a byte leaves. Fresh: this delivery owns the call and may send.
  Not fresh: the stored row says what happened (never send).
- ``await_claim``: a call another delivery holds, waited for while its lease runs (judged by
  the ledger's clock), booked ``unknown`` at its lost cost once the lease is over (a worker
  died mid-call), or the job's row if that delivery finished the job meanwhile. A lease
  further off than its holder could have put it (its stored reach, ``worker.ledger.leases``)
  is one no worker was given (a damaged row), and is booked ``unknown`` the same way.
- ``send``: the claimed request, whatever happens turned into a ``SentCall`` (a failure's
  call status from the one error-code map; a cancel or a bug in flight is ``unknown``).
- ``record``: the outcome, only onto this delivery's own claim.

Kinds (decide, packed, judgments, menus) build their messages from what these return.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog

from shared.errors import DecisionProviderError
from shared.replies import Receipt
from shared.settings import Settings
from worker.delivery.leased import MIN_EXTENSION_S, run_leased
from worker.delivery.ledger_io import LedgerIO
from worker.delivery.outage import until_written
from worker.delivery.records import LostCost, SentCall, bare_receipt, call_status, failure_reason
from worker.delivery.stats import DeliveryStats
from worker.ledger import (
    BudgetAsk,
    BudgetRefusal,
    CallOutcome,
    CallRow,
    Claim,
    ClaimLost,
    JobFinished,
    JobRow,
    OverBudget,
    PlannedOtherwise,
)
from worker.ledger.leases import trusted_reach
from worker.observability.observer import Observer
from worker.providers import was_cancelled
from worker.providers.base import DecisionProvider, PreparedRequest

__all__ = ["CLAIM_POLL_S", "RECORD_GRACE_S", "CallProtocol"]

log = structlog.get_logger("decisions.delivery")

#: How often a delivery that found a live duplicate's claim looks again.
CLAIM_POLL_S = 1.0
#: How long a worker holding an outcome keeps trying to record it through a ledger outage.
#: Safe however long: the write lands only on this delivery's own claim.
RECORD_GRACE_S = 300.0

T = TypeVar("T")


class CallProtocol:
    """Claim, await, send and record calls on one ledger, for every job kind."""

    settings: Settings
    ledger: LedgerIO
    observer: Observer
    stats: DeliveryStats

    # --- time ------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The ledger's clock: leases, deadlines and expiry are judged by it alone."""
        return self.ledger.now()

    def bounded(self, deadline: datetime, now: datetime | None = None) -> datetime:
        """``deadline``, or the ceiling's from ``now`` if it is further off: a deadline no job
        is given (a damaged row, say year 9999) must neither overflow the date arithmetic
        below nor make a lease that never ends."""
        moment = self.now() if now is None else now
        return min(deadline, moment + timedelta(seconds=self.settings.deadline_ceiling_s))

    def lease(self, deadline: datetime, now: datetime | None = None) -> datetime:
        """A claim's lease: the job's deadline (``bounded``) and the margin for its outcome's
        record."""
        return self.bounded(deadline, now) + timedelta(seconds=self.settings.lease_margin_s)

    def renewal(self) -> timedelta:
        """How far ahead a renewal moves a live lease (``worker.delivery.leased``)."""
        return timedelta(seconds=max(self.settings.lease_margin_s, MIN_EXTENSION_S))

    def is_late(self, deadline: datetime) -> bool:
        return self.now() >= deadline

    def local(self, deadline: datetime) -> datetime:
        """``deadline`` (by the ledger's clock) in this process's wall-clock terms, for the
        HTTP layer, which counts the time left with ``datetime.now``: a worker whose clock
        is off still gives a request exactly the time the ledger's clock leaves it."""
        now = self.now()
        return self.bounded(deadline, now) - (now - datetime.now(UTC))

    # --- claim and await -------------------------------------------------------------------

    async def claim(
        self,
        job_id: str,
        step: str,
        *,
        provider: str,
        model: str | None,
        request_sha256: str | None,
        deadline: datetime,
        budget: BudgetAsk | None = None,
    ) -> Claim | JobRow | BudgetRefusal:
        """The claim (fresh: send now; else the stored call), or the job's row when the job
        is finished: then nothing is claimed, and its stored message is what to publish. With
        ``budget``, a fresh claim has reserved the request's worst case; a ``BudgetRefusal``
        when a budget could not take it: nothing is claimed, and nothing may be sent (the
        job escalates ``budget_exhausted`` with its figures)."""
        claimed = await self.claim_in_plan(
            job_id, step, provider=provider, model=model, request_sha256=request_sha256,
            deadline=deadline, budget=budget, plan=None,
        )  # fmt: skip
        assert not isinstance(claimed, PlannedOtherwise)  # only a claim naming a plan
        return claimed

    async def claim_in_plan(
        self,
        job_id: str,
        step: str,
        *,
        plan: Mapping[str, str | None] | None,
        provider: str,
        model: str | None,
        request_sha256: str | None,
        deadline: datetime,
        budget: BudgetAsk | None = None,
    ) -> Claim | JobRow | BudgetRefusal | PlannedOtherwise:
        """``claim``, for a job whose delivery plans several calls: ``plan`` names them all
        (step: request digest), and a ``PlannedOtherwise`` comes back when the job holds a
        call the plan does not make: nothing is claimed, and nothing may be sent."""
        try:
            return await self.ledger.claim(
                job_id=job_id,
                step=step,
                provider=provider,
                model=model,
                request_sha256=request_sha256,
                lease_expires=self.lease(deadline),
                budget=budget,
                plan=plan,
            )
        except PlannedOtherwise as otherwise:
            return otherwise
        except JobFinished as finished:
            return finished.job
        except OverBudget as over:
            log.info("budget.refused", job_id=job_id, step=step, **over.refusal.figures())
            return over.refusal

    async def earlier_call(self, job_id: str, step: str) -> CallRow | None:
        """A late step: what an earlier delivery left of it (a ``not_sent`` one counts as
        nothing: it was never sent)."""
        earlier = await self.ledger.get_call(job_id, step)
        return earlier if earlier is not None and earlier.status != "not_sent" else None

    async def await_claim(
        self, job_id: str, step: str, call: CallRow, lost: LostCost = (None, None)
    ) -> CallRow | JobRow:
        """A call another delivery holds, once it is settled; or the job's row, if that
        delivery finished the job meanwhile (publish its message then).

        A live claim (its lease still runs) is waited for; one whose lease ran out belonged to
        a worker that died mid-call, and is booked ``unknown`` at ``lost`` (the provider's
        list price as an estimate where it has one). Nothing is ever sent here.

        A lease is waited for only as far as its holder could have put it (``beyond_reach``);
        a renewed one however long (a menu handler still running). A lease further off no
        worker holds (a damaged row, say year 9999): its call is booked ``unknown`` as a lost
        one is, by the one conditional write that closes a claim (``record``, onto this very
        claim), so the job is escalated, not waited for forever.
        """
        started = self.now()  # a damaged deadline's lease is counted from here (``lease``)
        while call.status == "claimed":
            now = self.now()
            if call.lease_expires < now:
                usd, basis = lost
                return await self.ledger.expire_claim(
                    job_id=job_id, step=step, cost_usd=usd, cost_basis=basis
                )
            row = await self.ledger.get_job(job_id)
            if row is not None and row.finished:
                return row
            if row is not None and self.beyond_reach(call, row.deadline, started, now):
                call = await self._book_lost(job_id, step, call, lost)
                continue
            await asyncio.sleep(min(CLAIM_POLL_S, (call.lease_expires - now).total_seconds()))
            latest = await self.ledger.get_call(job_id, step)
            assert latest is not None, "a claimed call never disappears"
            call = latest
        return call

    def beyond_reach(
        self, call: CallRow, deadline: datetime, started: datetime, now: datetime
    ) -> bool:
        """Whether ``call``'s lease lies further off than its holder could have put it (a
        damaged row), judged at ``now`` by a delivery that began waiting at ``started``.

        A claim keeps its reach: a live lease never lies further than that from now, whatever
        the holder's settings (another fleet's may be larger than this one's). A claim written
        before the reach was kept is judged by this worker's settings, as it was then: once
        the lease its job is given (``lease``, its ``deadline``) is over, a lease is only ever
        moved on by renewals, each at most ``renewal`` ahead. Either way a poll's time is
        allowed for the two clocks' readings."""
        slack = timedelta(seconds=CLAIM_POLL_S)
        trusted = None if call.lease_reach_s is None else trusted_reach(call.lease_reach_s)
        if trusted is not None:
            return call.lease_expires > now + timedelta(seconds=trusted) + slack
        return now >= self.lease(deadline, started) and (
            call.lease_expires > now + self.renewal() + slack
        )

    async def _book_lost(self, job_id: str, step: str, call: CallRow, lost: LostCost) -> CallRow:
        """Book ``call`` (still claimed, under a lease no worker was given) ``unknown`` at
        ``lost``, as an expired claim is; the stored row if its holder recorded it first."""
        log.error(
            "call.lease_unbounded",
            job_id=job_id,
            step=step,
            lease_expires=call.lease_expires.isoformat(),
        )
        # A packed request's share of its cost is the ledger's to work out (``expire_claim``
        # does it in SQL); not knowing it here, the share is booked unknown, never 0.
        usd, basis = (None, None) if call.pack_id is not None else lost
        outcome = CallOutcome(
            step=step,
            status="unknown",
            cost_usd=usd,
            cost_basis=basis,
            error_code="lease_expired",
            claims=call.claims,  # onto this claim only, never a later re-claim
        )
        try:
            return await self.ledger.record(job_id=job_id, outcome=outcome)
        except ClaimLost as taken:
            return taken.call

    # --- send and record -------------------------------------------------------------------

    async def send(
        self,
        provider: DecisionProvider,
        prepared: PreparedRequest,
        deadline: datetime,
        *,
        step: str,
        job_id: str,
    ) -> SentCall:
        """Send one claimed call (the caller holds the claim) and say what it came to."""
        self.observer.call_started(provider.name)
        started = time.monotonic()
        sent = await self._send(provider, prepared, deadline, step=step, job_id=job_id)
        receipt = sent.receipt
        self.observer.call_finished(
            provider.name,
            sent.status,
            time.monotonic() - started,
            receipt.cost_usd,
            receipt.cost_basis,
        )
        if sent.status != "not_sent":
            self.stats.add(receipt)
        return sent

    async def _send(
        self,
        provider: DecisionProvider,
        prepared: PreparedRequest,
        deadline: datetime,
        *,
        step: str,
        job_id: str,
    ) -> SentCall:
        try:
            result = await provider.send(prepared, self.local(deadline), step=step)
        except DecisionProviderError as exc:
            receipt = (
                exc.receipt
                if isinstance(exc.receipt, Receipt)
                else bare_receipt(provider, prepared, exc, step)
            )
            status = call_status(exc)
            receipt = receipt.model_copy(update={"status": status, "error_code": exc.code})
            return SentCall(
                status,
                receipt,
                reason=failure_reason(exc),
                detail=str(exc),
                error_code=exc.code,
                cancelled=was_cancelled(exc),
            )
        except asyncio.CancelledError:
            # Cancelled with the request possibly in flight: its outcome is unknown, for good.
            receipt = bare_receipt(provider, prepared, None, step).model_copy(
                update={"status": "unknown", "error_code": "aborted"}
            )
            return SentCall(
                "unknown",
                receipt,
                reason="decision_interrupted",
                detail="cancelled while in flight",
                error_code="aborted",
                cancelled=True,
            )
        except Exception as exc:
            # A bug after the claim: whether bytes left is unknown, so never send again.
            log.exception("call.crashed", job_id=job_id, step=step, error=type(exc).__name__)
            receipt = bare_receipt(provider, prepared, None, step).model_copy(
                update={"status": "unknown", "error_code": "internal"}
            )
            return SentCall(
                "unknown",
                receipt,
                reason="decision_interrupted",
                detail=f"internal error: {type(exc).__name__}",
                error_code="internal",
            )
        return SentCall("answered", result.receipt, answers=result.answers)

    async def run_local(
        self, fn: Callable[..., Any], kwargs: dict[str, Any], *, job_id: str, step: str, name: str
    ) -> Any:
        """Run a claimed local call (a handler or tool) in its own thread under the call's
        lease, renewed while it runs (``worker.delivery.leased``): the reaper never settles a
        live one, and a worker that cannot renew stops before its lease ends."""
        return await run_leased(
            fn,
            kwargs,
            ledger=self.ledger.ledger,
            job_id=job_id,
            step=step,
            name=name,
            extend_s=self.settings.lease_margin_s,
        )

    async def record(self, job_id: str, outcome: CallOutcome) -> CallRow:
        """Close this delivery's claimed call with its outcome (``ClaimLost`` if it is not
        claimed any more: the stored row wins). Through a ledger outage it is tried again
        (``worker.delivery.outage``): the answer may have been paid for."""
        return await self.hold_through_outage(
            lambda: self.ledger.record(job_id=job_id, outcome=outcome), f"record {outcome.step}"
        )

    async def hold_through_outage(self, write: Callable[[], Awaitable[T]], operation: str) -> T:
        """``write()`` (a conditional write of an outcome this delivery holds), tried again
        through a ledger outage for up to ``RECORD_GRACE_S``."""
        return await until_written(
            write,
            operation=operation,
            server=self.ledger.server,
            dialect=self.ledger.dialect,
            now=self.now,
            until=self.now() + timedelta(seconds=RECORD_GRACE_S),
        )
