"""The faux's rate limit: 429 with Retry-After past N a second, counted, set at run time."""

from __future__ import annotations

import httpx

from shared.canonical import canonical_bytes
from tests.faux.conftest import AUTH, system_one_body
from worker.testing.faux import FauxProvider, FauxServer
from worker.testing.faux.ratelimit import RateLimit

BODY = canonical_bytes(system_one_body())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_window_admits_n_a_second_and_says_when_to_come_back() -> None:
    clock = Clock()
    limit = RateLimit(3, clock=clock)
    assert limit.check() is None  # at 100.0
    clock.now += 0.5
    assert [limit.check(), limit.check()] == [None, None]  # at 100.5
    clock.now += 0.25
    wait = limit.check()
    assert wait is not None and abs(wait - 0.25) < 1e-9  # the first one leaves at 101.0
    clock.now += 0.25
    assert limit.check() is None  # its slot is free again...
    assert limit.check() is not None  # ...and only its slot
    assert limit.snapshot() == {"per_second": 3, "rejected": 2, "admitted": 4}


def test_over_the_rate_the_server_answers_429_and_counts_it_not_as_a_request() -> None:
    provider = FauxProvider()
    with FauxServer(provider) as server, httpx.Client(base_url=server.url) as client:
        put = client.put("/_faux/rate-limit", json={"per_second": 5})
        assert put.json() == {"per_second": 5, "rejected": 0, "admitted": 0}
        statuses = [
            client.post("/v1/systemone", content=BODY, headers=AUTH) for _ in range(8)
        ]
        assert [r.status_code for r in statuses] == [200] * 5 + [429] * 3
        retry_after = float(statuses[-1].headers["retry-after"])
        assert 0 < retry_after <= 1.0
        assert client.get("/_faux/rate-limit").json()["rejected"] == 3
        # Refused unprocessed: only the five answered requests were read.
        assert provider.total() == 5
        assert client.put("/_faux/rate-limit", json={"per_second": 0}).status_code == 400
        assert client.put("/_faux/rate-limit", json={"per_second": None}).status_code == 200
        assert client.post("/v1/systemone", content=BODY, headers=AUTH).status_code == 200
