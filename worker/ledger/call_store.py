"""The ledger's call methods (``Ledger`` inherits them): claim a call before it is sent, alone
or with the other members of a packed request, record its outcome, renew or expire its lease,
and read calls back; each in one committed transaction. The state machine of a call, and
why each step is what it is, are drawn in ``call_ops``; packs in ``pack_ops``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime

from sqlalchemy.engine import Connection

from worker.ledger import call_ops, leases, pack_ops
from worker.ledger.conflicts import conflicts_retried
from worker.ledger.errors import ClaimLost, OverBudget
from worker.ledger.models import calls, to_utc
from worker.ledger.pack_ops import MemberClaim, MemberFinish, PackClaim
from worker.ledger.rows import BudgetAsk, CallOutcome, CallRow, Claim, JobRow

__all__ = ["CallMethods"]


class CallMethods:
    """Call methods over ``transaction`` and ``now`` (``Ledger``'s)."""

    def transaction(self, *, read_only: bool = False) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def now(self) -> datetime:
        raise NotImplementedError

    @conflicts_retried
    def claim(
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
        """Claim the call (job_id, step); committed before this returns.

        ``fresh`` is True for a new call and for the re-claim of a ``not_sent`` one (its
        ``claims`` counts up); then the caller owns it and may send. Otherwise the stored row
        comes back untouched and nothing may be sent. ``JobFinished`` (nothing claimed) if
        the job has stored its terminal message, checked in the claim's own transaction.
        With ``budget``, a fresh claim reserves the request's worst case in the same
        transaction (``budget_ops``); ``OverBudget`` if a budget cannot take it: nothing is
        claimed. With ``plan``, ``PlannedOtherwise`` (nothing claimed) for a job holding a
        call the plan does not make (``call_ops.claim_call``).
        """
        with self.transaction() as conn:
            try:
                return call_ops.claim_call(
                    conn,
                    job_id=job_id,
                    step=step,
                    provider=provider,
                    model=model,
                    request_sha256=request_sha256,
                    lease_expires=lease_expires,
                    now=self.now(),
                    budget=budget,
                    plan=plan,
                )
            except OverBudget as over:
                refused = over  # raised once the budget the job's budget_usd set is committed
        # Nothing is claimed or reserved, but the budget a job's ``budget_usd`` created stays,
        # as on the group commit's path (which goes on after a refusal) and ``open_and_claim``'s:
        # ``decisions budget show`` then names what refused the batch on every path.
        raise refused

    @conflicts_retried
    def claim_pack(
        self,
        *,
        members: Sequence[MemberClaim],
        step: str,
        provider: str,
        model: str | None,
        request_sha256: str,
        pack_id: str,
    ) -> PackClaim:
        """Claim the call ``step`` of every member for one shared request, all or none.

        ``fresh`` when every member's call was claimed (committed before this returns: the
        caller may send the request). Otherwise nothing was claimed, and ``taken`` holds the
        stored calls that were not free: those members cannot be in the request; or
        ``refused``: a budget could not take a member's share of the worst case.
        """
        with self.transaction() as conn:
            taken, finished, refused = pack_ops.claim_members(
                conn,
                members=members,
                step=step,
                provider=provider,
                model=model,
                request_sha256=request_sha256,
                pack_id=pack_id,
                now=self.now(),
            )
            if taken or finished or refused:
                transaction = conn.get_transaction()
                assert transaction is not None
                transaction.rollback()
                return PackClaim(fresh=False, taken=taken, finished=finished, refused=refused)
        return PackClaim(fresh=True, taken={})

    @conflicts_retried
    def finish_pack(self, *, members: Sequence[MemberFinish]) -> list[JobRow | ClaimLost]:
        """Record every member's outcome and terminal message in one transaction.

        Per member, as ``finish_job``: a job finished already keeps its message (its row
        comes back), and a member whose call was expired meanwhile gets its ``ClaimLost``
        back with nothing written for it.
        """
        with self.transaction() as conn:
            return pack_ops.finish_members(conn, members=members, now=self.now())

    @conflicts_retried
    def record(self, *, job_id: str, outcome: CallOutcome) -> CallRow:
        """Close a claimed call with its outcome.

        Only a ``claimed`` row changes. Any other (answered, failed, not_sent, and above all
        an ``unknown`` a reaper booked after the lease ran out) is left as stored and
        ``ClaimLost`` is raised carrying it: raising rather than returning, so that a runner
        cannot mistake a refused write for a recorded one. ``CallNotFound`` if never claimed.
        """
        with self.transaction() as conn:
            return call_ops.record_call(conn, job_id=job_id, outcome=outcome, now=self.now())

    @conflicts_retried
    def expire_claim(
        self,
        *,
        job_id: str,
        step: str,
        now: datetime | None = None,
        cost_usd: float | None = None,
        cost_basis: str | None = None,
    ) -> CallRow:
        """Book a ``claimed`` call whose lease ended before ``now`` as ``unknown``.

        ``cost_usd``/``cost_basis`` book the list price as an estimate where the provider
        has one (leave them None for an unknown cost). Returns the current row either way.
        """
        moment = self.now() if now is None else to_utc(now)
        with self.transaction() as conn:
            return call_ops.expire_call(
                conn,
                job_id=job_id,
                step=step,
                now=moment,
                cost_usd=cost_usd,
                cost_basis=cost_basis,
            )

    @conflicts_retried
    def renew_lease(self, *, job_id: str, step: str, extend_s: float) -> bool:
        """Extend a claimed call's live lease to the database's now + ``extend_s`` (never
        shorter); False if the call is no longer claimed or its lease ran out (``leases``)."""
        with self.transaction() as conn:
            return leases.renew_lease(conn, job_id=job_id, step=step, extend_s=extend_s)

    def get_call(self, job_id: str, step: str) -> CallRow | None:
        with self.transaction(read_only=True) as conn:
            return call_ops.read_call(conn, job_id, step)

    def calls(self, job_id: str) -> list[CallRow]:
        """The job's calls in the order they were first claimed."""
        with self.transaction(read_only=True) as conn:
            return call_ops.list_calls(
                conn, calls.c.job_id == job_id, calls.c.claimed_at, calls.c.step
            )

    def expired_claims(self, now: datetime | None = None) -> list[CallRow]:
        """Claimed calls whose lease ended before ``now``: a reaper expires each of them."""
        moment = self.now() if now is None else to_utc(now)
        with self.transaction(read_only=True) as conn:
            return call_ops.list_calls(
                conn,
                (calls.c.status == "claimed") & (calls.c.lease_expires < moment),
                calls.c.lease_expires,
                calls.c.job_id,
                calls.c.step,
            )

    def unknown_calls(self) -> list[CallRow]:
        """Calls whose outcome will never be known (each was, or will be, escalated)."""
        with self.transaction(read_only=True) as conn:
            return call_ops.list_calls(
                conn, calls.c.status == "unknown", calls.c.finished_at, calls.c.job_id
            )
