"""The ledger as the delivery protocol calls it: one awaitable, named method per ledger call.

``Ledger`` is synchronous SQLAlchemy; a worker's loop must stay free for requests in flight.
Each method here runs its ``Ledger`` method on a thread, or, for the per-job hot path
(open and claim, claim, finish, mark published), hands it to the process's group commit
(``worker.ledger.batch.GroupCommit``) when one is installed, which runs many jobs' writes
in one transaction and answers each caller only after the commit. Either way the caller
learns exactly what the ``Ledger`` method would have told it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from worker.ledger import (
    BudgetAsk,
    BudgetRefusal,
    CallOutcome,
    CallRow,
    Claim,
    ClaimLost,
    JobRow,
    Ledger,
    MemberClaim,
    MemberFinish,
    PackClaim,
)
from worker.ledger.batch import GroupCommit
from worker.observability.tracing import claim_span

__all__ = ["LedgerIO"]


class LedgerIO:
    """``Ledger``'s calls, awaitable; hot-path writes grouped when ``group`` is set."""

    def __init__(self, ledger: Ledger, group: GroupCommit | None = None) -> None:
        self.ledger = ledger
        self.group = group

    @property
    def server(self) -> str:
        """The ledger's URL without its password, to name it in log lines."""
        return self.ledger.url

    @property
    def dialect(self) -> str:
        return self.ledger.dialect

    def now(self) -> datetime:
        """The ledger database's time: the one clock leases and deadlines are judged by."""
        return self.ledger.now()

    # --- jobs ------------------------------------------------------------------------------

    async def open_job(self, *, job: dict[str, Any]) -> JobRow:
        if self.group is not None:
            row: JobRow = await self.group.open_job(**job)
            return row
        return await asyncio.to_thread(lambda: self.ledger.open_job(**job))

    async def open_and_claim(
        self, *, job: dict[str, Any], claim: dict[str, Any]
    ) -> tuple[JobRow, Claim | BudgetRefusal | None]:
        with claim_span(job_id=job["job_id"], step=claim["step"], provider=claim["provider"]):
            if self.group is not None:
                opened: tuple[
                    JobRow, Claim | BudgetRefusal | None
                ] = await self.group.open_and_claim(job=job, claim=claim)
                return opened
            return await asyncio.to_thread(self.ledger.open_and_claim, job=job, claim=claim)

    async def get_job(self, job_id: str) -> JobRow | None:
        return await asyncio.to_thread(self.ledger.get_job, job_id)

    async def finish_job(
        self,
        *,
        job_id: str,
        message_type: str,
        reason: str | None,
        message_json: str,
        outcome: CallOutcome | None,
    ) -> JobRow:
        kwargs: dict[str, Any] = {
            "job_id": job_id,
            "message_type": message_type,
            "reason": reason,
            "message_json": message_json,
            "outcome": outcome,
        }
        if self.group is not None:
            row: JobRow = await self.group.finish_job(**kwargs)
            return row
        return await asyncio.to_thread(lambda: self.ledger.finish_job(**kwargs))

    async def mark_published(self, job_id: str) -> None:
        if self.group is not None:
            # In the group's next transaction: not one of its own (``GroupCommit``).
            self.group.mark_published_later(job_id)
            return
        await asyncio.to_thread(self.ledger.mark_published, job_id)

    # --- calls -----------------------------------------------------------------------------

    async def claim(
        self,
        *,
        job_id: str,
        step: str,
        provider: str,
        model: str | None,
        request_sha256: str | None,
        lease_expires: datetime,
        budget: BudgetAsk | None = None,
        plan: Mapping[str, str | None] | None = None,
    ) -> Claim:
        kwargs: dict[str, Any] = {
            "job_id": job_id,
            "step": step,
            "provider": provider,
            "model": model,
            "request_sha256": request_sha256,
            "lease_expires": lease_expires,
            "budget": budget,
        }
        if plan is not None:  # only judgment jobs name one (the group commit passes it on)
            kwargs["plan"] = plan
        with claim_span(job_id=job_id, step=step, provider=provider):
            if self.group is not None:
                claim: Claim = await self.group.claim(**kwargs)
                return claim
            return await asyncio.to_thread(lambda: self.ledger.claim(**kwargs))

    async def claim_pack(
        self,
        *,
        members: Sequence[MemberClaim],
        step: str,
        provider: str,
        model: str | None,
        request_sha256: str,
        pack_id: str,
    ) -> PackClaim:
        return await asyncio.to_thread(
            lambda: self.ledger.claim_pack(
                members=members,
                step=step,
                provider=provider,
                model=model,
                request_sha256=request_sha256,
                pack_id=pack_id,
            )
        )

    async def record(self, *, job_id: str, outcome: CallOutcome) -> CallRow:
        return await asyncio.to_thread(lambda: self.ledger.record(job_id=job_id, outcome=outcome))

    async def finish_pack(self, *, members: Sequence[MemberFinish]) -> list[JobRow | ClaimLost]:
        return await asyncio.to_thread(lambda: self.ledger.finish_pack(members=members))

    async def expire_claim(
        self,
        *,
        job_id: str,
        step: str,
        cost_usd: float | None = None,
        cost_basis: str | None = None,
    ) -> CallRow:
        """Book the claim ``unknown`` if its lease ended by the ledger's clock."""
        return await asyncio.to_thread(
            lambda: self.ledger.expire_claim(
                job_id=job_id, step=step, cost_usd=cost_usd, cost_basis=cost_basis
            )
        )

    async def resolved(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.ledger.resolved, job_id)

    async def get_call(self, job_id: str, step: str) -> CallRow | None:
        return await asyncio.to_thread(self.ledger.get_call, job_id, step)

    async def calls(self, job_id: str) -> list[CallRow]:
        return await asyncio.to_thread(self.ledger.calls, job_id)
