"""The dry run refuses what the worker would refuse before sending: both prepare a decide
job's request with the same code (``worker.kinds.decide.prepare_decide``), so a provider's limits
and models are checked at submit, not first discovered by the worker."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.settings import Settings
from worker.kinds.decide import prepare_decide
from worker.kinds.judgments.check import judgment_checker
from worker.kinds.judgments.dryrun_prices import parse_price
from worker.kinds.menus.submit import job_checker
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry


def decide(provider: str, instructions: str, **extra: Any) -> Any:
    return parse_job(
        {
            "id": f"dry-{provider}",
            "reply_to": "r",
            "provider": provider,
            "state": "a short state",
            "questions": {"q": {"type": "noul", "instructions": instructions}},
            **extra,
        }
    )


@pytest.fixture
def registries() -> tuple[ProviderRegistry, RuntimeRegistry]:
    settings = Settings(_env_file=None)
    return ProviderRegistry.from_settings(settings), RuntimeRegistry.from_settings(settings)


def test_a_question_over_parallels_limit_is_refused_by_the_dry_run_as_by_the_worker(
    registries: tuple[ProviderRegistry, RuntimeRegistry],
) -> None:
    providers, runtimes = registries
    job = decide("parallel", "Is it urgent? " * 500)  # renders past Parallel's 5,000 characters
    problems = job_checker(providers, runtimes)(job)
    assert [p.field for p in problems] == ["questions.q"]
    assert "5000" in problems[0].message
    with pytest.raises(JobInvalid) as worker_refusal:
        prepare_decide(job, providers)
    assert worker_refusal.value.problems == problems


def test_a_job_the_worker_would_send_passes_the_dry_run(
    registries: tuple[ProviderRegistry, RuntimeRegistry],
) -> None:
    providers, runtimes = registries
    assert job_checker(providers, runtimes)(decide("parallel", "Is it urgent?")) == []
    assert job_checker(providers, runtimes)(decide("faux", "Is it urgent?")) == []


def test_an_unknown_model_is_refused_by_both(
    registries: tuple[ProviderRegistry, RuntimeRegistry],
) -> None:
    providers, runtimes = registries
    job = decide("parallel", "Is it urgent?", model="not-a-parallel-model")
    problems = job_checker(providers, runtimes)(job)
    assert problems and problems[0].field == "model"


PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5Erk"
    "Jggg=="
)


@pytest.mark.parametrize(
    ("job", "field", "says"),
    [
        # A verifier's limit, not the job's provider's: the message names whose it is.
        (
            decide("faux", "Urgent?", state="z" * 100_000, verify={"provider": "parallel"}),
            "state",
            "100000 bytes; at most 96000; nothing was sent (parallel)",
        ),
        # The job carries "images"; "assets" is only the provider's name for them.
        (
            decide(
                "parallel",
                "Urgent?",
                state="see <i1>",
                images={"i1": {"format": "png", "data_base64": PNG}},
            ),
            "images",
            "Parallel takes no images; nothing was sent",
        ),
    ],
    ids=["verifier-state-limit", "images-for-parallel"],
)
def test_a_providers_refusal_names_the_jobs_field_once(
    registries: tuple[ProviderRegistry, RuntimeRegistry], job: Any, field: str, says: str
) -> None:
    providers, runtimes = registries
    # As `decisions submit` checks (worker.cli.queue): the judgments' plans, then the rest.
    problems = judgment_checker(providers, job_checker(providers, runtimes))(job)
    assert [(p.field, p.message) for p in problems] == [(field, says)]


@pytest.mark.parametrize(
    "text", ["faux=nan", "faux=-nan", "faux=inf", "faux=inf/request", "faux=1e400", "faux=1e308"]
)
def test_a_price_that_is_no_sensible_number_of_dollars_is_refused(text: str) -> None:
    """``float()`` took them: the dry run printed "$nan" or a 300-digit cost, and stored it
    for the batch's status (found by an attack)."""
    with pytest.raises(ValueError, match=r"a price is a number of USD from 0 to 10000"):
        parse_price(text)
    assert parse_price("faux=10000/request")[1].per_request_usd == 10_000
