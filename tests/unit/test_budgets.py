"""Budgets without servers: the job field, the settings, the worst case, the arithmetic, the
dry run's verdict. The ledger's part (reserve in the claim's transaction, settle after, races)
is in tests/ledger/test_ledger_budgets.py; the fleet's in tests/faults/test_budget_race.py."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from shared.errors import JobInvalid
from shared.estimate import estimate_jobs
from shared.job_parsing import parse_job
from shared.settings import Settings
from worker.kinds.decide import prepare_decide
from worker.ledger import BudgetRefusal
from worker.ledger.budget_ops import ceil_usd, charge, day_scope
from worker.providers import ProviderRegistry

QUESTIONS = {"q": {"type": "noul", "instructions": "Is it urgent?"}}


def job(**extra: Any) -> dict[str, Any]:
    return {
        "id": "j1",
        "kind": "decide",
        "reply_to": "replies",
        "batch": "b",
        "state": {"text": "The invoice is wrong."},
        "questions": QUESTIONS,
        **extra,
    }


# --- the job field, hostile ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [-1, 0, -0.0, float("nan"), float("inf"), 1e300, 10_000_001, "5", "", True, [], {"usd": 1}],
)
def test_hostile_budgets_are_rejected_naming_the_field(value: Any) -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job(job(budget_usd=value))
    assert [p.field for p in caught.value.problems] == ["budget_usd"]


def test_a_budget_needs_a_batch() -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job(job(batch=None, budget_usd=1.0))
    problem = caught.value.problems[0]
    assert problem.field == "budget_usd" and "batch" in problem.message


@pytest.mark.parametrize("value", [0.01, 5, 1_000_000])
def test_sane_budgets_pass(value: float) -> None:
    assert parse_job(job(budget_usd=value)).budget_usd == value


@pytest.mark.parametrize(
    "env", [{"max_price_per_mtok_usd": {"x": -1}}, {"daily_ceiling_usd": {"x": float("nan")}}]
)
def test_hostile_budget_settings_are_refused_naming_the_setting(env: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(**env)
    assert next(iter(env)) in str(caught.value)


# --- the worst case -----------------------------------------------------------------------


@pytest.fixture
def registry(request: pytest.FixtureRequest) -> Iterator[ProviderRegistry]:
    settings = Settings(faux_url="http://127.0.0.1:1", **getattr(request, "param", {}))
    made = ProviderRegistry.from_settings(settings)
    yield made
    asyncio.run(made.aclose())


def worst(registry: ProviderRegistry, **extra: Any) -> float | None:
    provider, prepared = prepare_decide(parse_job(job(**extra)), registry)
    return registry.worst_cost(provider, prepared)


def test_parallel_reserves_its_list_price(registry: ProviderRegistry) -> None:
    assert worst(registry, provider="parallel") == 0.001


def test_a_priced_host_reserves_its_bytes_at_its_price(registry: ProviderRegistry) -> None:
    provider, prepared = prepare_decide(parse_job(job(provider="typesafe")), registry)
    got = registry.worst_cost(provider, prepared)
    assert got == pytest.approx(0.042 * len(prepared.body) / 1e6)
    # Never below what the host's booked estimate can come to (4 bytes a token).
    assert got is not None and got >= 0.042 * (len(prepared.body) // 4) / 1e6


def test_openrouter_has_no_known_maximum_unless_configured(registry: ProviderRegistry) -> None:
    assert worst(registry, provider="openrouter", model="liquid/d1") is None


@pytest.mark.parametrize(
    "registry", [{"max_price_per_mtok_usd": {"openrouter": 0.5}}], indirect=True
)
def test_a_configured_maximum_prices_the_worst_case(registry: ProviderRegistry) -> None:
    provider, prepared = prepare_decide(
        parse_job(job(provider="openrouter", model="liquid/d1")), registry
    )
    assert registry.worst_cost(provider, prepared) == pytest.approx(0.5 * len(prepared.body) / 1e6)


@pytest.mark.parametrize(
    "registry",
    [{"max_price_per_mtok_usd": {"openrouter": 0.5}, "openrouter_max_price_routing": True}],
    indirect=True,
)
def test_openrouter_can_be_told_the_same_ceiling(registry: ProviderRegistry) -> None:
    import json

    provider, prepared = prepare_decide(
        parse_job(job(provider="openrouter", model="liquid/d1")), registry
    )
    assert json.loads(prepared.body)["provider"] == {"max_price": {"prompt": 0.5}}
    # The worst case is counted on the bytes sent, the routing option included.
    assert registry.worst_cost(provider, prepared) == pytest.approx(0.5 * len(prepared.body) / 1e6)


def test_openrouter_is_told_nothing_unless_asked(registry: ProviderRegistry) -> None:
    import json

    _, prepared = prepare_decide(parse_job(job(provider="openrouter", model="liquid/d1")), registry)
    assert "provider" not in json.loads(prepared.body)


def test_a_budget_on_a_provider_with_no_maximum_is_rejected_naming_the_field(
    registry: ProviderRegistry,
) -> None:
    with pytest.raises(JobInvalid) as caught:
        prepare_decide(
            parse_job(job(provider="openrouter", model="liquid/d1", budget_usd=2)), registry
        )
    problem = caught.value.problems[0]
    assert problem.field == "budget_usd"
    assert "no known maximum" in problem.message and "MAX_PRICE_PER_MTOK_USD" in problem.message
    # The same job without a budget runs (its cost is booked as it comes).
    prepare_decide(parse_job(job(provider="openrouter", model="liquid/d1")), registry)


# --- the arithmetic -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cost", "held"),
    [
        ("claimed", None, 0.3),
        ("answered", 0.1, 0.1),
        ("answered", None, 0.3),  # an unknown cost keeps the reservation, never 0
        ("unknown", None, 0.3),
        ("unknown", 0.3, 0.3),  # a lost request booked at its list price, the worst case
        # A lost request's estimate is a guess from the request alone (a priced host's input
        # tokens, no output): the worst case reserved stays held, never the guess.
        ("unknown", 0.001, 0.3),
        ("unknown", 0.5, 0.5),  # a booking above the reservation is the truth
        ("failed", 0.0, 0.0),
        ("not_sent", None, 0.0),  # released
        ("not_sent", 0.2, 0.0),
    ],
)
def test_what_a_call_holds_of_its_budget(status: str, cost: float | None, held: float) -> None:
    assert charge(status, cost, 0.3) == held


@pytest.mark.parametrize("usd", [0.00003, 1e-13, 0.1 + 0.2, 123.456789012345, 0.0])
def test_a_reservation_is_never_below_the_worst_case(usd: float) -> None:
    rounded = ceil_usd(usd)
    assert rounded >= usd and rounded - usd < 2e-12


def test_a_huge_worst_case_stays_itself() -> None:
    assert ceil_usd(1e300) == 1e300 and math.isinf(ceil_usd(math.inf))


def test_a_refusal_names_its_figures_and_the_way_on() -> None:
    refusal = BudgetRefusal("batch:b", 1.0, 0.98, 0.05, "faux")
    assert refusal.left_usd == pytest.approx(0.02)
    assert refusal.figures() == {
        "budget": "batch:b",
        "limit_usd": 1.0,
        "committed_usd": 0.98,
        "left_usd": pytest.approx(0.02),
        "worst_case_usd": 0.05,
        "provider": "faux",
    }
    assert "decisions budget resume" in refusal.detail() and "nothing was sent" in refusal.detail()
    over = BudgetRefusal("batch:b", 1.0, 1.5, 0.05, "faux")  # lowered below what it holds
    assert over.left_usd == 0.0


def test_a_daily_scope_is_the_ledger_days() -> None:
    from datetime import UTC, datetime

    assert day_scope("parallel", datetime(2026, 12, 1, 23, 59, tzinfo=UTC)) == (
        "day:parallel:2026-12-01"
    )


# --- the dry run --------------------------------------------------------------------------


def estimate(
    budget: float | None, settings: Settings | None = None, n: int = 10, **extra: Any
) -> Any:
    jobs = [
        parse_job(
            job(id=f"j{i}", budget_usd=budget, **extra) if budget else job(id=f"j{i}", **extra)
        )
        for i in range(n)
    ]
    return estimate_jobs(jobs, settings or Settings(), batch="b")


def test_the_dry_run_says_whether_a_batch_fits() -> None:
    # Parallel: 10 requests at $0.001 list price, worst case = estimate = $0.01.
    assert estimate(None, provider="parallel").budget_fit is None
    assert estimate(0.01, provider="parallel").budget_fit == "fits"
    assert estimate(0.005, provider="parallel").budget_fit == "over"
    # TypeSafe: the estimate is a quarter of the worst case (4 bytes a token).
    e = estimate(1.0, provider="typesafe")
    assert e.worst_usd == pytest.approx(4 * e.cost_known_usd, rel=0.05)
    tight = estimate(e.cost_known_usd * 2, provider="typesafe")
    assert tight.budget_fit == "tight"
    # The faux has no known maximum unless configured.
    assert estimate(1.0).budget_fit == "no_maximum"
    assert estimate(1.0, Settings(max_price_per_mtok_usd={"faux": 0.1})).budget_fit == "fits"


def test_the_dry_run_judges_an_exact_fit_as_the_ledger_does() -> None:
    from shared.estimate import Estimate

    # Three requests of $0.10 worst case under $0.30: 0.30000000000000004 in binary floats.
    assert Estimate(budget_usd=0.3, worst_usd=0.1 + 0.1 + 0.1).budget_fit == "fits"
    assert Estimate(budget_usd=0.3, worst_usd=0.300002).budget_fit != "fits"


def test_a_stored_estimate_keeps_its_verdict() -> None:
    from shared.estimate import Estimate

    e = estimate(0.005, provider="parallel")
    again = Estimate.from_json(e.to_json())
    assert (again.budget_usd, again.worst_usd, again.budget_fit) == (0.005, 0.01, "over")
