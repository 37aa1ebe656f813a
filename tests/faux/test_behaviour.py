"""Every behaviour, through the in-process transport and through the real server alike."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from shared.canonical import digest_of
from worker.testing.faux import FauxBehaviour, FauxProvider

from .conftest import openai_body, post, system_one_body

Either = tuple[FauxProvider, httpx.Client]


def keyed(call_key: str) -> dict[str, str]:
    return {"X-Decisions-Call": call_key}


def parallel_body() -> dict[str, object]:
    body = system_one_body()
    del body["model"]
    return body


def test_ok_counts_by_digest_and_call(either: Either) -> None:
    provider, client = either
    body = system_one_body()
    for key in ("job-1:decide", "job-1:decide", "job-2:decide"):
        assert post(client, "/v1/systemone", body, headers=keyed(key)).is_success
    post(client, "/v1/systemone", system_one_body(state="another"))
    other = digest_of(system_one_body(state="another"))
    assert provider.requests() == {digest_of(body): 3, other: 1}
    assert provider.calls() == {"job-1:decide": 2, "job-2:decide": 1}
    assert client.get("/_faux/requests").json() == provider.requests()
    assert client.get("/_faux/calls").json() == provider.calls()
    assert provider.total() == 4
    assert client.post("/_faux/reset").is_success
    assert client.get("/_faux/requests").json() == {} and provider.calls() == {}


def test_control_endpoints_are_not_counted(either: Either) -> None:
    provider, client = either
    assert client.get("/_faux/health").json() == {"status": "ok"}
    client.get("/v1/models")
    client.get("/_faux/requests")
    assert provider.total() == 0
    assert client.get("/nowhere").status_code == 404
    assert client.get("/v1/systemone").status_code == 405
    assert client.delete("/_faux/behaviour").status_code == 405


def test_percent_encoded_call_keys_are_decoded(either: Either) -> None:
    provider, client = either
    post(client, "/v1/systemone", system_one_body(), headers=keyed("j%C3%B8b:decide"))
    assert provider.calls() == {"jøb:decide": 1}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/systemone", system_one_body()),
        ("/api/v1/systemone", system_one_body()),
        ("/v1/decisions", parallel_body()),
        ("/v1/decisions", openai_body()),
    ],
)
def test_rate_limit_with_and_without_retry_after(either: Either, path: str, body: object) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="rate_limit", retry_after_s=2))
    response = post(client, path, body)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    provider.set_behaviour(FauxBehaviour(mode="rate_limit", retry_after_s=0.25))
    assert post(client, path, body).headers["retry-after"] == "0.25"
    provider.set_behaviour(FauxBehaviour(mode="rate_limit"))
    response = post(client, path, body)
    assert response.status_code == 429 and "retry-after" not in response.headers
    assert provider.total() == 3


ENVELOPES = {
    "/v1/systemone": lambda p, s: "error_type" in p["detail"] and "message" in p["detail"],
    "/api/v1/systemone": lambda p, s: p["error"]["code"] == s and "metadata" in p["error"],
    "/v1/decisions": lambda p, s: p["type"] == "error" and p["error"]["ref_id"],
}


@pytest.mark.parametrize("status", [500, 502, 503, 529, 408, 400, 401, 422, 403])
@pytest.mark.parametrize("path", list(ENVELOPES))
def test_status_in_the_documented_envelope(either: Either, status: int, path: str) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="status", status_code=status))
    body = parallel_body() if path == "/v1/decisions" else system_one_body()
    response = post(client, path, body)
    assert response.status_code == status
    assert ENVELOPES[path](response.json(), status)
    assert provider.count(digest_of(body)) == 1


def test_status_defaults_to_500_and_openai_has_its_envelope(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="status"))
    response = post(client, "/v1/decisions", openai_body())
    assert response.status_code == 500
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_connection_drop_before_read_is_not_counted(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="drop_before_read"))
    with pytest.raises(httpx.TransportError) as caught:
        post(client, "/v1/systemone", system_one_body())
    assert type(caught.value) is httpx.RemoteProtocolError
    assert provider.requests() == {}


def test_connection_drop_after_read_is_counted(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="drop_after_read"))
    with pytest.raises(httpx.TransportError) as caught:
        post(client, "/v1/systemone", system_one_body(), headers=keyed("j:decide"))
    assert type(caught.value) is httpx.RemoteProtocolError
    assert provider.requests() == {digest_of(system_one_body()): 1}
    assert provider.calls() == {"j:decide": 1}


def test_reset_after_read_is_a_read_error_and_counted(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="reset_after_read"))
    with pytest.raises(httpx.TransportError) as caught:
        post(client, "/v1/systemone", system_one_body())
    assert type(caught.value) is httpx.ReadError
    assert provider.total() == 1


def test_garbage_is_a_200_that_is_not_json(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="garbage"))
    response = post(client, "/api/v1/systemone", system_one_body())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_bad_probabilities(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="bad_probabilities"))
    answers = post(client, "/v1/systemone", system_one_body()).json()["answers"]
    for qid in ("department", "frustration"):
        assert abs(sum(answers[qid]["probabilities"].values()) - 0.7) < 1e-9
    assert answers["is_urgent"]["noul"] > 1
    openai = post(client, "/v1/decisions", openai_body()).json()["answers"]
    assert abs(sum(p["probability"] for p in openai[1]["probabilities"]) - 0.7) < 1e-9


def test_refuse_some_questions(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="refuse", refuse_questions=("is_urgent", "nope")))
    answers = post(client, "/v1/systemone", system_one_body()).json()["answers"]
    assert set(answers) == {"department", "frustration"}


def test_fail_first_then_ok(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="status", status_code=503, fail_first=2))
    statuses = [post(client, "/v1/systemone", system_one_body()).status_code for _ in range(4)]
    assert statuses == [503, 503, 200, 200]
    assert provider.count(digest_of(system_one_body())) == 4
    provider.reset()  # restarts the budget as well as the counts
    assert post(client, "/v1/systemone", system_one_body()).status_code == 503


def test_fail_first_zero_never_fails(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="drop_after_read", fail_first=0))
    assert post(client, "/v1/systemone", system_one_body()).status_code == 200


def test_fail_first_with_a_connection_mode(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(mode="drop_before_read", fail_first=1))
    with pytest.raises(httpx.RemoteProtocolError):
        post(client, "/v1/systemone", system_one_body())
    assert post(client, "/v1/systemone", system_one_body()).status_code == 200
    assert provider.total() == 1


@pytest.mark.parametrize("mode", ["drop_before_read", "drop_after_read", "reset_after_read"])
def test_an_override_makes_only_one_call_misbehave(either: Either, mode: str) -> None:
    provider, client = either
    provider.override("job-2:decide", FauxBehaviour(mode=mode))
    ok = post(client, "/v1/systemone", system_one_body(), headers=keyed("job-1:decide"))
    assert ok.status_code == 200
    with pytest.raises(httpx.TransportError):
        post(client, "/v1/systemone", system_one_body(), headers=keyed("job-2:decide"))
    post(client, "/v1/systemone", system_one_body())  # no call key: the default behaviour
    expected = {"job-1:decide": 1} if mode == "drop_before_read" else {
        "job-1:decide": 1, "job-2:decide": 1
    }
    assert provider.calls() == expected
    provider.override("job-2:decide", None)
    post(client, "/v1/systemone", system_one_body(), headers=keyed("job-2:decide"))


def test_an_override_has_its_own_fail_first(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(
        FauxBehaviour(
            mode="status",
            status_code=502,
            overrides={"k": FauxBehaviour(mode="rate_limit", fail_first=1)},
        )
    )
    assert post(client, "/v1/systemone", system_one_body(), headers=keyed("k")).status_code == 429
    assert post(client, "/v1/systemone", system_one_body(), headers=keyed("k")).status_code == 200
    assert post(client, "/v1/systemone", system_one_body()).status_code == 502


def test_behaviour_changes_at_run_time_over_http(either: Either) -> None:
    provider, client = either
    put = client.put("/_faux/behaviour", json={"mode": "status", "status_code": 529})
    assert put.status_code == 200 and put.json()["status_code"] == 529
    assert provider.behaviour.mode == "status"
    assert post(client, "/v1/systemone", system_one_body()).status_code == 529
    # PATCH merges; PUT replaces (what it leaves out goes back to its default).
    client.patch("/_faux/behaviour", json={"latency_ms": 5})
    assert client.get("/_faux/behaviour").json()["mode"] == "status"
    assert client.get("/_faux/behaviour").json()["latency_ms"] == 5
    client.put("/_faux/behaviour", json={"latency_ms": 1})
    assert client.get("/_faux/behaviour").json()["mode"] == "ok"
    assert post(client, "/v1/systemone", system_one_body()).status_code == 200


def test_put_with_overrides_over_http(either: Either) -> None:
    _, client = either
    client.put("/_faux/behaviour", json={"overrides": {"bad": {"mode": "garbage"}}})
    response = post(client, "/v1/systemone", system_one_body(), headers=keyed("bad"))
    assert response.status_code == 200 and response.content.startswith(b'{"answers": {"q": <')


@pytest.mark.parametrize(
    "payload",
    [{"mode": "explode"}, {"status_code": 200}, {"latency_ms": -1}, {"surprise": 1}, [1],
     {"overrides": {"a": {"overrides": {"b": {}}}}}],
)
def test_an_invalid_behaviour_changes_nothing(either: Either, payload: object) -> None:
    provider, client = either
    before = provider.behaviour
    response = client.put("/_faux/behaviour", json=payload)
    assert response.status_code in (400, 422)
    assert provider.behaviour is before


def test_latency_is_waited(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(latency_ms=150))
    started = time.perf_counter()
    assert post(client, "/v1/systemone", system_one_body()).status_code == 200
    assert time.perf_counter() - started >= 0.15


def test_a_slow_answer_is_a_read_timeout(either: Either) -> None:
    provider, client = either
    provider.set_behaviour(FauxBehaviour(latency_ms=2000))
    started = time.perf_counter()
    with pytest.raises(httpx.TransportError) as caught:
        post(client, "/v1/systemone", system_one_body(), timeout=httpx.Timeout(5, read=0.2))
    assert type(caught.value) is httpx.ReadTimeout
    assert time.perf_counter() - started < 1.5  # gave up at the client's timeout
    assert provider.total() == 1  # the host read it: the outcome is unknown, not unsent


def test_update_behaviour_validates(provider: FauxProvider) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        provider.update_behaviour(mode="nonsense")
    assert provider.update_behaviour(latency_ms=3).latency_ms == 3
