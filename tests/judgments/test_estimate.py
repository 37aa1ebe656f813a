"""The estimate's arithmetic: requests per job kind, list price against token prices, an
unknown price stays unknown (never 0), and a stored estimate reads back the same."""

from __future__ import annotations

import fakeredis
import pytest

from shared.canonical import canonical_bytes
from shared.client import Client
from shared.estimate import Estimate, estimate_jobs, planned_requests
from shared.job_parsing import parse_job
from shared.prices import Price
from shared.settings import Settings
from tests.judgments.support import route_job, sift_job, verified_job
from worker.kinds.judgments.dryrun_prices import faux_price, parse_price

SETTINGS = Settings(_env_file=None)


def test_each_kind_plans_its_requests() -> None:
    sift = parse_job(sift_job("s", [f"m{i}" for i in range(150)], provider="parallel"))
    assert [p.step for p in planned_requests(sift, SETTINGS)] == ["sift.0", "sift.1"]
    route = parse_job(route_job("r"))
    assert [p.step for p in planned_requests(route, SETTINGS)] == ["route"]
    verified = parse_job(verified_job("v", "s", provider="typesafe", stakes="high"))
    planned = planned_requests(verified, SETTINGS)
    assert [(p.step, p.provider, p.model) for p in planned] == [
        ("decide", "faux", "faux-1"),
        ("verify.0", "typesafe", "jev-latest"),
        ("verify.1", "typesafe", "jev-latest"),
    ]
    body = {"model": "faux-1", "questions": {q: v.wire() for q, v in verified.questions.items()},
            "state": "s"}
    assert planned[0].input_tokens == len(canonical_bytes(body)) // 4
    menu = parse_job({"id": "m", "kind": "menu", "reply_to": "r", "prompt": "Pick.",
                      "options": [{"kind": "value", "name": "a", "value": 1}]})
    assert planned_requests(menu, SETTINGS) == []


def test_prices_by_basis_and_unknown_is_never_zero() -> None:
    jobs = [
        parse_job(sift_job("p", [f"m{i}" for i in range(250)], provider="parallel")),
        parse_job(route_job("o", provider="openrouter", model="liquid/d1")),
        parse_job(route_job("t", provider="typesafe")),
    ]
    estimate = estimate_jobs(jobs, SETTINGS)
    parallel = estimate.by_provider["parallel"]
    assert (parallel.requests, parallel.cost_usd, parallel.basis) == (3, pytest.approx(0.003),
                                                                       "list_price")
    assert estimate.by_provider["openrouter"].cost_usd is None
    assert estimate.by_provider["openrouter"].basis == "unknown"
    typesafe = estimate.by_provider["typesafe"]
    assert typesafe.cost_usd == pytest.approx(0.042 * typesafe.input_tokens / 1e6)
    assert estimate.cost_unknown and estimate.cost_known_usd == pytest.approx(
        0.003 + typesafe.cost_usd
    )
    priced = estimate_jobs(jobs, SETTINGS, prices={"openrouter": Price(per_mtok_usd=1.0)})
    assert not priced.cost_unknown
    assert priced.by_provider["openrouter"].cost_usd == pytest.approx(
        priced.by_provider["openrouter"].input_tokens / 1e6
    )


def test_the_faux_is_priced_per_model_and_prices_parse() -> None:
    price = faux_price()
    assert price.cost("faux-1", 1_000_000) == pytest.approx(0.10)
    assert price.cost("typesafe/jev-1.14", 1_000_000) == pytest.approx(0.042)
    assert price.cost("jev-1.14", 1_000_000) == pytest.approx(0.042)
    assert parse_price("openrouter=0.3") == ("openrouter", Price(per_mtok_usd=0.3))
    assert parse_price("x=0.002/request") == ("x", Price(per_request_usd=0.002))
    for bad in ("openrouter", "=1", "a=-1"):
        with pytest.raises(ValueError):
            parse_price(bad)


def test_client_estimate_rejects_names_and_stores_each_batch() -> None:
    r = fakeredis.FakeRedis()
    client = Client(SETTINGS, redis_client=r)
    jobs = [
        sift_job("a", ["x", "y"], batch="b1"),
        route_job("b", batch="b2"),
        {**route_job("c", batch="b1"), "routes": {}},
        "not json",
    ]
    report = client.estimate(jobs)
    assert sorted(report.batches) == ["b1", "b2"]
    assert set(report.rejected) == {"c"} and set(report.rejected_lines) == {3}
    stored = client.stored_estimate("b1")
    assert stored is not None and stored.requests == 1 and stored.jobs == 1
    assert Estimate.from_json(report.batches["b2"].to_json()).by_provider.keys() == {"faux"}
    assert client.stored_estimate("nope") is None
    untouched = fakeredis.FakeRedis()
    Client(SETTINGS, redis_client=untouched).estimate(jobs, store=False)
    assert untouched.keys("*") == []
