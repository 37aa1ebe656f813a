"""A batch's name reaches no other budget, whatever it holds (SQLite and PostgreSQL).

A call keeps the budgets it reserved against in one column, which is read again when it
settles and matched when a budget's figures are counted. Found by an attack: the scopes were
joined with spaces and split on any whitespace, and a batch name may hold spaces, so a call
of batch ``victim x`` settled into batch ``victim``'s budget (its $0 answers gave back what
the victim's calls had reserved: a $1 budget spent $3), ``anything batch:victim`` reached
any batch by name, and ``z day:PROVIDER:DATE`` a provider's daily ceiling.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from worker.ledger import BudgetAsk, CallOutcome, JobRow, Ledger, OverBudget, budget_scopes
from worker.ledger.budget_ops import day_scope

VICTIM = "victim"
#: Names that split, on whitespace, into the victim's scope (or into a day's).
HOSTILE = [
    "victim x",
    "victim ",
    "victim\u00a0x",
    "victim\u2003x",
    "anything batch:victim",
    "victim%20x",
    " victim",
]


def later(seconds: float = 150.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def spend(
    ledger: Ledger,
    job: JobRow,
    worst: float,
    cost: float | None,
    *,
    budget: float | None = None,
    ceiling: float | None = None,
) -> None:
    """Claim the job's call reserving ``worst``; answer it at ``cost`` (None: in flight)."""
    ledger.claim(
        job_id=job.job_id,
        step="decide",
        provider="faux",
        model="faux-1",
        request_sha256="sha",
        lease_expires=later(),
        budget=BudgetAsk(
            worst_usd=worst,
            batch=job.batch,
            batch_budget_usd=budget,
            daily_ceiling_usd=ceiling,
        ),
    )
    if cost is not None:
        ledger.record(
            job_id=job.job_id,
            outcome=CallOutcome(
                step="decide", status="answered", cost_usd=cost, cost_basis="reported"
            ),
        )


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_batch_settles_into_its_own_budget_only(
    ledger: Ledger, new_job: Callable[..., JobRow], hostile: str
) -> None:
    ledger.set_budget(VICTIM, 1.0)
    for _ in range(2):  # each reserves $0.50 and costs nothing
        spend(ledger, new_job(batch=hostile), 0.5, 0.0, budget=1000.0)
    spend(ledger, new_job(batch=hostile), 0.5, None, budget=1000.0)  # one left in flight
    victim = ledger.budget(VICTIM)
    own = ledger.budget(hostile)
    assert victim is not None and own is not None
    assert (victim.committed_usd, victim.calls_in_flight, victim.left_usd) == (0.0, 0, 1.0)
    assert (own.committed_usd, own.calls_in_flight, own.reserved_usd) == (0.5, 1, 0.5)
    assert own.booked_by_basis == {"reported": 0.0}
    # The victim's own calls: two at $0.50, and the third refused.
    spend(ledger, new_job(batch=VICTIM), 0.5, 0.5)
    spend(ledger, new_job(batch=VICTIM), 0.5, 0.5)
    with pytest.raises(OverBudget):
        spend(ledger, new_job(batch=VICTIM), 0.5, 0.5)
    victim = ledger.budget(VICTIM)
    assert victim is not None and victim.spent_usd == 1.0 and victim.left_usd == 0.0


def test_a_batch_named_after_a_day_leaves_the_providers_ceiling_alone(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    day = day_scope("faux", ledger.now())
    hostile = f"z {day}"
    spend(ledger, new_job(batch="honest"), 0.5, 0.5, ceiling=1.0)
    for _ in range(3):
        spend(ledger, new_job(batch=hostile), 0.5, 0.0, budget=1000.0, ceiling=1.0)
    ceiling = ledger.budget_of_scope(day)
    assert ceiling is not None and ceiling.committed_usd == 0.5
    spend(ledger, new_job(batch="honest"), 0.5, 0.5, ceiling=1.0)
    with pytest.raises(OverBudget):
        spend(ledger, new_job(batch="honest"), 0.5, 0.5, ceiling=1.0)


@pytest.mark.parametrize("name", ["nightly run", "50% off", "a%20b", "tab\u3000wide"])
def test_a_budget_set_on_a_batch_in_flight_counts_its_calls_whatever_its_name(
    ledger: Ledger, new_job: Callable[..., JobRow], name: str
) -> None:
    # Calls claimed before the budget existed are brought under it when it is made (at $0:
    # they reserved nothing) and settle into it; a neighbour's whose name is a word of it,
    # or it a word of the neighbour's, is not.
    flying = new_job(batch=name)
    spend(ledger, flying, 0.5, None)
    neighbour = new_job(batch=name.split()[0] if " " in name else name + " x")
    spend(ledger, neighbour, 0.5, None)
    made = ledger.set_budget(name, 2.0)
    assert (made.committed_usd, made.calls_in_flight) == (0.0, 1)
    for job, cost in ((flying, 0.2), (neighbour, 0.3)):
        ledger.record(
            job_id=job.job_id,
            outcome=CallOutcome(
                step="decide", status="answered", cost_usd=cost, cost_basis="reported"
            ),
        )
    after = ledger.budget(name)
    assert after is not None
    assert (after.committed_usd, after.calls_in_flight, after.spent_usd) == (0.2, 0, 0.2)


def test_scopes_read_back_as_written_and_usual_names_unchanged() -> None:
    scopes = ("batch:a b", "batch:%20", "batch:\u00a0\t%", "day:faux:2026-12-05", "batch:")
    text = budget_scopes.scopes_text(scopes)
    assert budget_scopes.scopes_of(text) == scopes
    assert len(text.split()) == len(scopes)  # however whitespace is split
    assert budget_scopes.scopes_text(["batch:nightly-run_2", "day:faux:2026-12-05"]) == (
        "batch:nightly-run_2 day:faux:2026-12-05"  # as rows written before read
    )
