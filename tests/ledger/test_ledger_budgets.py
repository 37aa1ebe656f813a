"""Budgets in the ledger: the worst case reserved in the claim's transaction, settled after.

Every test runs on SQLite and PostgreSQL. The race test claims from several threads (each
its own connection) against one small budget: the sum committed never passes the limit, and
exactly as many claims win as the budget admits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker.ledger import (
    BudgetAsk,
    CallOutcome,
    Claim,
    JobRow,
    Ledger,
    MemberClaim,
    OverBudget,
    budget_ops,
)
from worker.ledger.budget_ops import day_scope


def later(seconds: float = 150.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def claim(
    ledger: Ledger,
    job_id: str,
    worst: float | None,
    *,
    batch: str = "b",
    budget: float | None = None,
    step: str = "decide",
    ceiling: float | None = None,
    provider: str = "faux",
) -> Claim:
    return ledger.claim(
        job_id=job_id,
        step=step,
        provider=provider,
        model="faux-1",
        request_sha256="sha",
        lease_expires=later(),
        budget=BudgetAsk(
            worst_usd=worst, batch=batch, batch_budget_usd=budget, daily_ceiling_usd=ceiling
        ),
    )


def outcome(status: str, cost: float | None, basis: str | None = None) -> CallOutcome:
    return CallOutcome(step="decide", status=status, cost_usd=cost, cost_basis=basis)  # type: ignore[arg-type]


def committed(ledger: Ledger, batch: str = "b") -> float:
    found = ledger.budget(batch)
    assert found is not None
    return found.committed_usd


def test_a_claim_reserves_its_worst_case(ledger: Ledger, new_job: Callable[..., JobRow]) -> None:
    job = new_job(batch="b")
    got = claim(ledger, job.job_id, 0.25, budget=1.0)
    assert got.fresh and got.call.reserved_usd == 0.25 and got.call.budget_scopes == "batch:b"
    status = ledger.budget("b")
    assert status is not None
    assert (status.limit_usd, status.committed_usd, status.reserved_usd) == (1.0, 0.25, 0.25)
    assert status.left_usd == 0.75 and status.calls_in_flight == 1


@pytest.mark.parametrize(
    ("status", "cost", "basis", "held"),
    [
        ("answered", 0.1, "reported", 0.1),  # a known cost replaces the reservation
        ("answered", 0.05, "estimate", 0.05),
        ("unknown", None, None, 0.25),  # an unknown cost keeps the whole reservation
        # A lost request booked at a guess from the request alone: the worst case stays.
        ("unknown", 0.01, "estimate", 0.25),
        ("answered", None, None, 0.25),  # answered without a cost: still never 0
        ("failed", 0.0, "reported", 0.0),
        ("not_sent", None, None, 0.0),  # never sent: released
    ],
)
def test_settling_replaces_the_reservation(
    ledger: Ledger,
    new_job: Callable[..., JobRow],
    status: str,
    cost: float | None,
    basis: str | None,
    held: float,
) -> None:
    job = new_job(batch="b")
    claim(ledger, job.job_id, 0.25, budget=1.0)
    ledger.record(job_id=job.job_id, outcome=outcome(status, cost, basis))
    assert committed(ledger) == pytest.approx(held)
    figures = ledger.budget("b")
    assert figures is not None and figures.reserved_usd == 0.0
    if status == "unknown" or (status != "not_sent" and cost is None):
        assert figures.held_unknown_usd == 0.25 and figures.calls_unknown_cost == 1
        assert figures.booked_by_basis == {}


def test_a_claim_that_does_not_fit_is_refused_with_the_figures(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    first, second = new_job(batch="b"), new_job(batch="b")
    claim(ledger, first.job_id, 0.6, budget=1.0)
    with pytest.raises(OverBudget) as refused:
        claim(ledger, second.job_id, 0.6)
    figures = refused.value.refusal
    assert (figures.scope, figures.limit_usd, figures.committed_usd, figures.worst_usd) == (
        "batch:b",
        1.0,
        0.6,
        0.6,
    )
    assert "budget batch:b exhausted" in str(refused.value) and "nothing was sent" in str(
        refused.value
    )
    assert ledger.get_call(second.job_id, "decide") is None  # nothing claimed
    assert committed(ledger) == 0.6  # nothing reserved


@pytest.mark.parametrize(
    ("worst", "limit", "fits"),
    [
        (0.1, 0.3, 3),  # 0.1 + 0.1 + 0.1 is 0.30000000000000004 in binary floats
        (0.07, 0.21, 3),
        (0.003, 0.009, 3),
        (0.000123, 0.000369, 3),  # each reserved as 0.000123000001 (ceil_usd)
        (0.1, 1.0, 10),
    ],
)
def test_a_budget_holds_exactly_as_many_claims_as_fit_it(
    ledger: Ledger, new_job: Callable[..., JobRow], worst: float, limit: float, fits: int
) -> None:
    """Float noise never refuses a claim that fits, and never admits one that does not."""
    for _ in range(fits):
        assert claim(ledger, new_job(batch="b").job_id, worst, budget=limit).fresh
    with pytest.raises(OverBudget):
        claim(ledger, new_job(batch="b").job_id, worst)
    assert committed(ledger) == pytest.approx(limit, abs=1e-9)  # passed by no more than that
    # A day's ceiling is the same statement.
    for _ in range(fits):
        claim(ledger, new_job(batch="d").job_id, worst, batch="d", ceiling=limit, provider="p")
    with pytest.raises(OverBudget):
        claim(ledger, new_job(batch="d").job_id, worst, batch="d", ceiling=limit, provider="p")


def test_raising_the_budget_lets_the_next_claim_through(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    first, second = new_job(batch="b"), new_job(batch="b")
    claim(ledger, first.job_id, 0.6, budget=1.0)
    with pytest.raises(OverBudget):
        claim(ledger, second.job_id, 0.6)
    ledger.set_budget("b", 1.2)
    assert claim(ledger, second.job_id, 0.6).fresh


def test_lowering_the_budget_cancels_nothing_sent(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    first, second = new_job(batch="b"), new_job(batch="b")
    claim(ledger, first.job_id, 0.6, budget=1.0)
    status = ledger.set_budget("b", 0.1)
    assert status.committed_usd == 0.6 and status.left_usd == pytest.approx(-0.5)
    call = ledger.get_call(first.job_id, "decide")
    assert call is not None and call.status == "claimed"
    ledger.record(job_id=first.job_id, outcome=outcome("answered", 0.01, "reported"))
    assert committed(ledger) == pytest.approx(0.01)
    with pytest.raises(OverBudget):
        claim(ledger, second.job_id, 0.6)


def test_a_jobs_budget_never_lowers_one_set_already(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ledger.set_budget("b", 5.0)
    job = new_job(batch="b")
    claim(ledger, job.job_id, 1.0, budget=0.5)
    assert ledger.budget("b").limit_usd == 5.0  # type: ignore[union-attr]


def test_no_known_maximum_cannot_run_under_a_budget(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    job = new_job(batch="b")
    with pytest.raises(OverBudget) as refused:
        claim(ledger, job.job_id, None, budget=1.0)
    assert refused.value.refusal.worst_usd is None
    assert "no known maximum" in str(refused.value) and "budget_usd" in str(refused.value)
    # Without a budget the same call runs (its cost is booked as it comes).
    other = new_job(batch="free")
    assert claim(ledger, other.job_id, None, batch="free").call.reserved_usd is None


def test_a_daily_ceiling_covers_every_batch_of_its_provider(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    a, b = new_job(batch="x"), new_job(batch="y")
    got = claim(ledger, a.job_id, 0.7, batch="x", ceiling=1.0)
    assert got.call.budget_scopes == day_scope("faux", ledger.now())
    with pytest.raises(OverBudget) as refused:
        claim(ledger, b.job_id, 0.7, batch="y", ceiling=1.0)
    assert refused.value.refusal.scope.startswith("day:faux:")
    assert "DECISIONS_DAILY_CEILING_USD" in str(refused.value)


def test_both_budgets_or_neither(ledger: Ledger, new_job: Callable[..., JobRow]) -> None:
    """A claim the daily ceiling refuses leaves nothing reserved against the batch either."""
    a, b = new_job(batch="b"), new_job(batch="b")
    claim(ledger, a.job_id, 0.5, budget=10.0, ceiling=0.6)
    with pytest.raises(OverBudget):
        claim(ledger, b.job_id, 0.5, ceiling=0.6)
    assert committed(ledger) == 0.5


def test_a_redelivery_of_a_settled_call_reserves_nothing(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    job = new_job(batch="b")
    claim(ledger, job.job_id, 0.6, budget=1.0)
    ledger.record(job_id=job.job_id, outcome=outcome("answered", 0.1, "reported"))
    again = claim(ledger, job.job_id, 0.6)  # would not fit twice; settled calls never reserve
    assert not again.fresh and committed(ledger) == pytest.approx(0.1)


def test_a_not_sent_call_reclaimed_reserves_again(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    job = new_job(batch="b")
    claim(ledger, job.job_id, 0.4, budget=1.0)
    ledger.record(job_id=job.job_id, outcome=outcome("not_sent", None))
    assert committed(ledger) == 0.0
    again = claim(ledger, job.job_id, 0.4)
    assert again.fresh and again.call.reserved_usd == 0.4 and committed(ledger) == 0.4


def test_an_expired_claim_keeps_its_reservation_or_books_its_lost_cost(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    a, b = new_job(batch="b"), new_job(batch="b")
    for job in (a, b):
        ledger.claim(
            job_id=job.job_id,
            step="decide",
            provider="faux",
            model=None,
            request_sha256="s",
            lease_expires=datetime.now(UTC) - timedelta(seconds=1),
            budget=BudgetAsk(worst_usd=0.3, batch="b", batch_budget_usd=1.0),
        )
    ledger.expire_claim(job_id=a.job_id, step="decide")  # unknown cost: the 0.3 stays
    # Booked at a guess (a priced host's input tokens): the outcome is unknown, 0.3 stays too.
    ledger.expire_claim(job_id=b.job_id, step="decide", cost_usd=0.001, cost_basis="estimate")
    assert committed(ledger) == pytest.approx(0.6)


def test_a_pack_reserves_for_all_members_or_none(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ids = [new_job(batch="b").job_id for _ in range(3)]
    ledger.set_budget("b", 1.0)
    ask = BudgetAsk(worst_usd=0.4, batch="b")
    refused = ledger.claim_pack(
        members=[MemberClaim(j, later(), ask) for j in ids],
        step="decide",
        provider="faux",
        model=None,
        request_sha256="s",
        pack_id="p",
    )
    assert not refused.fresh and refused.refused is not None
    assert committed(ledger) == 0.0  # rolled back: the first two members' shares too
    assert all(ledger.get_call(j, "decide") is None for j in ids)
    ok = ledger.claim_pack(
        members=[MemberClaim(j, later(), ask) for j in ids[:2]],
        step="decide",
        provider="faux",
        model=None,
        request_sha256="s",
        pack_id="p2",
    )
    assert ok.fresh and committed(ledger) == pytest.approx(0.8)


def test_setting_a_budget_counts_what_the_batch_spent_before(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    job = new_job(batch="b")
    claim(ledger, job.job_id, None)  # no budget yet: no reservation
    ledger.record(job_id=job.job_id, outcome=outcome("answered", 0.2, "reported"))
    status = ledger.set_budget("b", 1.0)
    assert status.committed_usd == pytest.approx(0.2) and status.spent_before_usd == 0.2


def test_resume_reopens_only_the_exhausted_jobs(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    done, exhausted, other = new_job(batch="b"), new_job(batch="b"), new_job(batch="b")
    ledger.finish_job(job_id=done.job_id, message_type="result", reason=None, message_json="{}")
    ledger.finish_job(
        job_id=exhausted.job_id,
        message_type="escalation",
        reason="budget_exhausted",
        message_json="{}",
    )
    ledger.finish_job(
        job_id=other.job_id, message_type="escalation", reason="low_confidence", message_json="{}"
    )
    reopened = ledger.reopen_exhausted("b")
    assert [r.job_id for r in reopened] == [exhausted.job_id]
    row = ledger.get_job(exhausted.job_id)
    assert row is not None and not row.finished and row.resumes == 1
    assert row.deadline > ledger.now()
    # Interrupted before it enqueued them: a second resume finds the same open job again.
    assert [r.job_id for r in ledger.reopen_exhausted("b")] == [exhausted.job_id]
    assert ledger.get_job(exhausted.job_id).resumes == 1  # type: ignore[union-attr]


def test_racing_claims_never_pass_the_budget(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    """Eight threads (their own connections) claim 40 calls of 0.1 against a budget of 1.0."""
    ids = [new_job(batch="race").job_id for _ in range(40)]
    ledger.set_budget("race", 1.0)
    wins: list[str] = []
    refusals: list[str] = []
    lock = threading.Lock()

    def run(part: list[str]) -> None:
        for job_id in part:
            try:
                got = claim(ledger, job_id, 0.1, batch="race")
            except OverBudget:
                with lock:
                    refusals.append(job_id)
                continue
            with lock:
                wins.append(job_id)
            # Half settle below their reservation at once: the room they free is taken again.
            if len(job_id) % 2:
                ledger.record(job_id=job_id, outcome=outcome("answered", 0.05, "reported"))
            assert got.fresh

    threads = [threading.Thread(target=run, args=(ids[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status = ledger.budget("race")
    assert status is not None
    assert len(wins) + len(refusals) == 40
    assert status.committed_usd <= 1.0 + 1e-9
    calls = [ledger.get_call(j, "decide") for j in wins]
    booked = sum(
        (c.cost_usd if c.cost_usd is not None and c.status != "claimed" else c.reserved_usd or 0)
        for c in calls
        if c is not None
    )
    assert booked == pytest.approx(status.committed_usd)
    assert status.committed_usd > 1.0 - 0.1 - 1e-9  # the budget was used, not left idle


def test_group_commit_reserves_each_new_job_and_refuses_alone(ledger: Ledger) -> None:
    """The hot path: many jobs opened and claimed in one transaction (``GroupCommit``); the
    budget admits two worst cases, the other writes get their refusal, each its own, and a
    job of a batch without a budget is claimed as ever."""
    import asyncio

    from worker.ledger import BudgetRefusal
    from worker.ledger.batch import GroupCommit

    group = GroupCommit(ledger)

    def write(job_id: str, batch: str) -> dict[str, object]:
        return {
            "job": {
                "job_id": job_id,
                "kind": "decide",
                "batch": batch,
                "reply_to": "r",
                "fingerprint": "f",
                "deadline": later(),
                "job_json": "{}",
            },
            "claim": {
                "step": "decide",
                "provider": "parallel",
                "model": None,
                "request_sha256": "s",
                "lease_expires": later(),
                "budget": BudgetAsk(worst_usd=0.4, batch=batch, batch_budget_usd=1.0)
                if batch == "b"
                else BudgetAsk(worst_usd=None, batch=batch),
            },
        }

    async def scenario() -> list[object]:
        return await asyncio.gather(
            *(group.open_and_claim(**write(f"g{i}", "b")) for i in range(5)),
            group.open_and_claim(**write("free", "nobudget")),
        )

    try:
        results = asyncio.run(scenario())
    finally:
        group.close()
    claims = [claim for _, claim in results]  # type: ignore[misc]
    fresh = [c for c in claims if isinstance(c, Claim) and c.fresh]
    refused = [c for c in claims if isinstance(c, BudgetRefusal)]
    assert len(fresh) == 3 and len(refused) == 3  # 2 of the budget's 5 fit; "free" is claimed
    assert committed(ledger) == pytest.approx(0.8)
    free = ledger.get_call("free", "decide")
    assert free is not None and free.reserved_usd is None
    for refusal in refused:
        assert refusal.worst_usd == 0.4 and refusal.committed_usd == pytest.approx(0.8)


@pytest.mark.parametrize("path", ["claim", "open_and_claim"])
def test_a_refused_first_claim_leaves_its_batch_budget_on_every_path(
    ledger: Ledger, new_job: Callable[..., JobRow], path: str
) -> None:
    """A job's ``budget_usd`` that cannot take even the first request still sets the batch's
    budget, whichever write refused it: ``decisions budget show`` names what refused the
    batch, and the refusal's figures are the budget's."""
    ask = BudgetAsk(worst_usd=0.6, batch="b", batch_budget_usd=0.5)
    if path == "claim":
        job = new_job(batch="b")
        with pytest.raises(OverBudget):
            claim(ledger, job.job_id, 0.6, budget=0.5)
    else:
        _, refusal = ledger.open_and_claim(
            job={
                "job_id": "first",
                "kind": "decide",
                "batch": "b",
                "reply_to": "r",
                "fingerprint": "f",
                "deadline": later(),
                "job_json": "{}",
            },
            claim={
                "step": "decide",
                "provider": "faux",
                "model": None,
                "request_sha256": "s",
                "lease_expires": later(),
                "budget": ask,
            },
        )
        assert refusal is not None and not isinstance(refusal, Claim)
    figures = ledger.budget("b")
    assert figures is not None
    assert (figures.limit_usd, figures.committed_usd, figures.calls_in_flight) == (0.5, 0.0, 0)


def test_a_daily_ceiling_first_met_counts_what_its_provider_booked_that_day(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    """Found by an attack: a ceiling set in the afternoon started the day's count at $0, so
    the day's spend passed it by what was booked that morning. As a batch's budget counts
    what its batch booked before, a day's counts its provider's calls claimed that day."""
    for i, cost in enumerate((0.3, 0.4)):  # booked before any ceiling, today
        job = new_job(batch=f"early-{i}")
        claim(ledger, job.job_id, None, batch=f"early-{i}", provider="faux")
        ledger.record(job_id=job.job_id, outcome=outcome("answered", cost, "reported"))
    other = new_job(batch="elsewhere")  # another provider's spend counts in its own day
    claim(ledger, other.job_id, None, batch="elsewhere", provider="parallel")
    ledger.record(job_id=other.job_id, outcome=outcome("answered", 5.0, "reported"))
    late = new_job(batch="late")
    with pytest.raises(OverBudget) as refused:  # 0.7 booked + 0.4 worst > 1.0
        claim(ledger, late.job_id, 0.4, batch="late", ceiling=1.0, provider="faux")
    assert refused.value.refusal.committed_usd == pytest.approx(0.7)
    assert claim(ledger, late.job_id, 0.3, batch="late", ceiling=1.0, provider="faux").fresh


def test_a_budget_set_while_calls_are_in_flight_counts_what_they_cost(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    """Found by an attack: `decisions budget set` on a running batch counted only calls
    already settled; the 40 in flight settled into no budget, and the batch spent 3.4 times
    a limit it had passed before the next claim. Calls in flight when a budget is made are
    brought under it, each settling its cost into it."""
    flying = [new_job(batch="b") for _ in range(3)]
    for job in flying:
        claim(ledger, job.job_id, None)  # no budget yet: no reservation
    ledger.set_budget("b", 0.5)
    assert committed(ledger) == pytest.approx(0.0)
    for job in flying:
        ledger.record(job_id=job.job_id, outcome=outcome("answered", 0.2, "reported"))
    assert committed(ledger) == pytest.approx(0.6)
    late = new_job(batch="b")
    with pytest.raises(OverBudget):
        claim(ledger, late.job_id, 0.01)
    # A daily ceiling first met while its provider's calls fly counts them the same way.
    day = [new_job(batch=f"d{i}") for i in range(2)]
    for i, job in enumerate(day):
        claim(ledger, job.job_id, None, batch=f"d{i}", provider="parallel")
    first = new_job(batch="d-late")
    claim(ledger, first.job_id, 0.1, batch="d-late", ceiling=1.0, provider="parallel")
    for job in day:
        ledger.record(job_id=job.job_id, outcome=outcome("answered", 0.5, "reported"))
    second = new_job(batch="d-later")
    with pytest.raises(OverBudget):  # 0.1 reserved + 1.0 settled + 0.1 > 1.0
        claim(ledger, second.job_id, 0.1, batch="d-later", ceiling=1.0, provider="parallel")


def test_two_first_claims_racing_to_make_a_budget_count_each_call_once(
    pg_url: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a fresh-clone CI run (the fault suite's budget race): two workers' first
    claims of a batch both read no budget. One made it, reserved and committed; the other,
    making it too, brought that call in flight under it a second time (its scopes read
    ``batch:b batch:b``), so its settlement moved the budget twice and the budget undercounted
    the batch by three quarters of a worst case. Only the claim that makes the budget brings
    calls in flight under it. (PostgreSQL only: SQLite serialises writers, so no second claim
    can read between another's read and its commit.)"""
    ledger = Ledger(pg_url())
    ledger.migrate()
    try:
        first, second = (
            ledger.open_job(
                job_id=f"race-{i}",
                kind="decide",
                batch="b",
                reply_to="replies:test",
                fingerprint="fp",
                deadline=later(120),
                job_json='{"id": "x"}',
            )
            for i in (1, 2)
        )
        real_read = budget_ops.read_budget
        interleaved: list[bool] = []

        def stale_read(conn: Any, scope: str) -> Any:
            # The second claim's transaction reads no budget; the first claim then makes it,
            # reserves and commits (its own connection, another thread) before the second
            # goes on: the interleaving two workers met in the fault suite.
            found = real_read(conn, scope)
            if not interleaved and threading.current_thread() is threading.main_thread():
                interleaved.append(True)
                racer = threading.Thread(
                    target=claim, args=(ledger, first.job_id, 0.4), kwargs={"budget": 1.0}
                )
                racer.start()
                racer.join(timeout=30)
            return found

        monkeypatch.setattr(budget_ops, "read_budget", stale_read)
        claim(ledger, second.job_id, 0.4, budget=1.0)
        monkeypatch.undo()
        assert interleaved
        raced = ledger.get_call(first.job_id, "decide")
        assert raced is not None and raced.budget_scopes == "batch:b"
        assert committed(ledger) == pytest.approx(0.8)
        ledger.record(job_id=first.job_id, outcome=outcome("answered", 0.1, "reported"))
        assert committed(ledger) == pytest.approx(0.5)  # 0.1 booked + 0.4 reserved
    finally:
        ledger.dispose()


def test_a_call_settling_while_its_batchs_budget_is_made_is_counted_once(
    ledger: Ledger, new_job: Callable[..., JobRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: a claim making its batch's budget (a job's ``budget_usd``, in a
    batch whose earlier jobs carried none) summed what the batch had spent, then brought the
    calls in flight under it, each statement its own snapshot (PostgreSQL); a call that
    settled between the two was in neither (up to 8 calls of 61 missed). Here the call
    settles, on its own connection, right after the first counting statement, whichever it
    is: the budget must hold its cost once, beside the new claim's reservation."""
    flying, first = new_job(batch="b"), new_job(batch="b")
    claim(ledger, flying.job_id, None)  # no budget yet: no reservation
    counted: list[str] = []
    settler: list[threading.Thread] = []
    settled = outcome("answered", 0.2, "reported")

    def after_first(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counting(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            counted.append(name)
            if len(counted) == 1:
                thread = threading.Thread(
                    target=ledger.record, kwargs={"job_id": flying.job_id, "outcome": settled}
                )
                thread.start()
                thread.join(timeout=1.0)  # done, or waiting for a row this statement holds
                settler.append(thread)
            return result

        return counting

    for name in ("spent_so_far", "bring_in_flight"):
        monkeypatch.setattr(budget_ops, name, after_first(name, getattr(budget_ops, name)))
    claim(ledger, first.job_id, 0.1, budget=1.0)  # makes the budget
    settler[0].join(timeout=30)
    call = ledger.get_call(flying.job_id, "decide")
    assert call is not None and call.status == "answered"
    assert committed(ledger) == pytest.approx(0.3)
