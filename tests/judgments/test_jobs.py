"""The sift, route and verify contract: what validates, what is rejected and the field named,
at parse time and when the worker plans the requests (nothing sent)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.jobs import DecideJob, RouteJob, SiftJob
from shared.judgments import wants_verification
from shared.settings import Settings
from tests.judgments.support import route_job, sift_job, verified_job
from worker.kinds.judgments import plan_problems, plan_route, plan_sift, plan_verified
from worker.providers import ProviderRegistry


@pytest.fixture(scope="module")
def registry() -> ProviderRegistry:
    return ProviderRegistry.from_settings(Settings(_env_file=None))


def fields_of(raw: Any) -> list[str]:
    with pytest.raises(JobInvalid) as info:
        parse_job(raw)
    return [p.field for p in info.value.problems]


def test_a_sift_job_parses_with_or_without_a_state() -> None:
    job = parse_job(sift_job("s", ["a", {"b": 1}, [1, 2]]))
    assert isinstance(job, SiftJob) and job.question.type == "noul"
    bare = parse_job({**sift_job("s", ["a"]), "state": None})
    assert isinstance(bare, SiftJob) and bare.state is None


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"items": []}, ["items"]),
        ({"items": ["ok", "  ", 7, None]}, ["items.1", "items.2", "items.3"]),
        ({"question": {"type": "choice", "instructions": "x", "criteria": {"a": None}}},
         ["question.type", "question.criteria.a"]),
        ({"question": {"instructions": "x", "escalate_below": 2}}, ["question.escalate_below"]),
        ({"state": 3}, ["state"]),
        ({"items": ["a"] * 10_001}, ["items"]),
    ],
)
def test_a_bad_sift_job_names_each_bad_field(change: dict[str, Any], fields: list[str]) -> None:
    assert fields_of({**sift_job("s", ["a"]), **change}) == fields


def test_a_route_job_defaults_its_question_and_checks_its_routes() -> None:
    job = parse_job(route_job("r"))
    assert isinstance(job, RouteJob) and job.unsure == "human" and job.floor is None
    assert fields_of({**route_job("r"), "routes": {}}) == ["routes"]
    assert fields_of({**route_job("r"), "floor": 1.5}) == ["floor"]
    assert fields_of({**route_job("r"), "unsure": ""}) == ["unsure"]


def test_verify_counts_one_by_default_two_at_high_stakes_and_at_most_four() -> None:
    def count(**verify: Any) -> int:
        job = parse_job(verified_job("v", "s", **verify))
        assert isinstance(job, DecideJob) and job.verify is not None
        return job.verify.verifications

    assert count(model="m") == 1
    assert count(model="m", stakes="high") == 2
    assert count(model="m", stakes="high", count=3) == 3
    assert fields_of(verified_job("v", "s", model="m", count=5)) == ["verify.count"]
    assert fields_of(verified_job("v", "s", model="m", count=0)) == ["verify.count"]
    assert fields_of(verified_job("v", "s", count=2)) == ["verify"]
    assert wants_verification(verified_job("v", "s", model="m"))
    assert not wants_verification({**verified_job("v", "s", model="m"), "verify": None})


def test_planning_names_what_a_provider_would_refuse(registry: ProviderRegistry) -> None:
    # Parallel takes at least 2 options, and at most 5,000 rendered characters a question.
    one_route = parse_job({**route_job("r"), "provider": "parallel", "routes": {"only": None}})
    problems = plan_problems(one_route, registry) or []
    assert [p.field for p in problems] == ["routes"] and "2 to 255" in problems[0].message
    big = parse_job(sift_job("s", ["ok", "x" * 6_000], provider="parallel"))
    assert [p.field for p in plan_problems(big, registry) or []] == ["items.1"]
    unknown = parse_job(sift_job("s", ["ok"], provider="nope"))
    assert [p.field for p in plan_problems(unknown, registry) or []] == ["provider"]


def test_a_verification_must_be_another_provider_or_model(registry: ProviderRegistry) -> None:
    same = parse_job(verified_job("v", "s", model="faux-1"))
    assert isinstance(same, DecideJob)
    with pytest.raises(JobInvalid) as info:
        plan_verified(same, registry)
    assert [p.field for p in info.value.problems] == ["verify"]
    other = parse_job(verified_job("v", "s", provider="parallel", model="gpt-x"))
    assert isinstance(other, DecideJob)
    with pytest.raises(JobInvalid) as info:
        plan_verified(other, registry)
    assert [p.field for p in info.value.problems] == ["verify.model"]
    fine = parse_job(verified_job("v", "s", model="typesafe/jev-1.14", count=3))
    assert isinstance(fine, DecideJob)
    plan = plan_verified(fine, registry)
    assert [c.step for c in plan.verifiers] == ["verify.0", "verify.1", "verify.2"]
    assert {c.prepared.model for c in plan.verifiers} == {"typesafe/jev-1.14"}
    assert plan.primary.step == "decide" and plan.primary.prepared.model == "faux-1"


def test_sift_and_route_plans_carry_their_call_keys(registry: ProviderRegistry) -> None:
    sift = parse_job(sift_job("s9", [f"m{i}" for i in range(205)], provider="parallel"))
    assert isinstance(sift, SiftJob)
    steps = [(c.step, len(c.question_ids), c.prepared.headers["X-Decisions-Call"])
             for c in plan_sift(sift, registry)]
    assert steps == [("sift.0", 100, "s9/sift.0"), ("sift.1", 100, "s9/sift.1"),
                     ("sift.2", 5, "s9/sift.2")]
    route = parse_job(route_job("r9"))
    assert isinstance(route, RouteJob)
    assert plan_route(route, registry).prepared.headers["X-Decisions-Call"] == "r9/route"
