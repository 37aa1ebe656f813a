"""The four response shapes and the catalogs, as a client sees them over HTTP."""

from __future__ import annotations

import json

import httpx

from shared.canonical import digest_of
from worker.testing.faux import FauxBehaviour, FauxProvider, answer_question, system_one_response
from worker.testing.faux.wire import (
    PARALLEL_CITATIONS_FIELD,
    PARALLEL_REQUEST_ID_FIELD,
    TYPESAFE_REQUEST_ID_HEADER,
)

from .conftest import openai_body, post, system_one_body


def test_typesafe_shape_has_no_id_or_cost_and_a_request_id_header(client: httpx.Client) -> None:
    body = system_one_body()
    response = post(client, "/v1/systemone", body)
    assert response.status_code == 200
    payload = response.json()
    assert set(payload) == {"model", "answers", "usage"}
    assert payload["model"] == "jev-latest"
    assert set(payload["answers"]) == set(body["questions"])
    assert set(payload["usage"]) == {"input_tokens", "output_tokens"}
    assert payload["usage"]["input_tokens"] == len(response.request.content) // 4
    assert response.headers[TYPESAFE_REQUEST_ID_HEADER].startswith("req_")
    # What the wire says is what the pure function says.
    assert payload["answers"] == system_one_response(body)["answers"]


def test_a_request_without_model_is_answered_as_faux_1(client: httpx.Client) -> None:
    body = system_one_body()
    del body["model"]
    payload = post(client, "/v1/systemone", body).json()
    assert payload["model"] == "faux-1"
    question = body["questions"]["department"]
    assert payload["answers"]["department"] == answer_question("faux-1", question, body["state"])


def test_openrouter_shape_adds_id_provider_and_cost(client: httpx.Client) -> None:
    body = system_one_body(model="liquid/d1")
    first = post(client, "/api/v1/systemone", body).json()
    second = post(client, "/api/v1/systemone", body).json()
    assert first["id"].startswith("gen-dec-") and first["id"] != second["id"]
    assert first["provider"] == "faux"
    usage = first["usage"]
    assert usage["cost"] > 0
    assert abs(usage["cost"] - usage["input_tokens"] * 0.05e-6) < 1e-12  # the catalog's price
    assert first["answers"] == second["answers"]


def test_openrouter_requires_a_model(client: httpx.Client) -> None:
    body = system_one_body()
    del body["model"]
    response = post(client, "/api/v1/systemone", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


def test_parallel_shape(client: httpx.Client) -> None:
    body = system_one_body()
    del body["model"]
    response = post(client, "/v1/decisions", body, headers={"Authorization": "", "x-api-key": "k"})
    assert response.status_code == 200
    payload = response.json()
    assert payload[PARALLEL_REQUEST_ID_FIELD].startswith("dec_")
    assert payload["mode"] == "fast"
    assert list(payload["answers"]) == sorted(body["questions"])  # as sent: canonical order
    assert "usage" not in payload  # Parallel reports no cost: the provider books list price
    citations = payload[PARALLEL_CITATIONS_FIELD]
    assert 1 <= len(citations) <= 3
    for citation in citations:
        assert citation["url"].startswith("https://faux.invalid/")
        assert citation["excerpts"] == [body["state"]]
    # Answered as model parallel-fast, so not the same answers as a System One host gives.
    question = body["questions"]["department"]
    expected = answer_question("parallel-fast", question, body["state"])
    assert payload["answers"]["department"] == expected


def test_parallel_without_excerpts(client: httpx.Client) -> None:
    body = {**system_one_body(), "include_excerpts": False}
    del body["model"]
    payload = post(client, "/v1/decisions", body).json()
    assert all(c["excerpts"] == [] for c in payload["citations"])


def test_parallel_refusal_is_typed(provider: FauxProvider, client: httpx.Client) -> None:
    provider.set_behaviour(FauxBehaviour(mode="refuse", refuse_questions=("department",)))
    body = system_one_body()
    del body["model"]
    answers = post(client, "/v1/decisions", body).json()["answers"]
    assert answers["department"] == {"type": "refusal"}
    assert answers["is_urgent"]["type"] == "noul"


def test_openai_shape_keeps_order_and_maps_types(client: httpx.Client) -> None:
    body = openai_body()
    body["questions"].reverse()
    response = post(client, "/v1/decisions", body)
    assert response.status_code == 200
    payload = response.json()
    assert payload["id"].startswith("dec_") and payload["model"] == "gpt-6-luna"
    answers = payload["answers"]
    assert [a["name"] for a in answers] == ["frustration", "department", "is_urgent"]
    score, choice, predicate = answers
    assert set(predicate) == {"type", "name", "probability"}
    assert predicate["type"] == "predicate" and 0 <= predicate["probability"] <= 1
    assert set(choice) == {"type", "name", "choice", "confidence", "probabilities"}
    values = [p["value"] for p in choice["probabilities"]]
    assert values == ["billing", "technical", True]  # the boolean stays a boolean
    assert choice["choice"] in values
    assert abs(sum(p["probability"] for p in choice["probabilities"]) - 1) < 1e-9
    assert [(p["value"], p["label"]) for p in score["probabilities"]] == [
        (0, "Calm"), (1, "Frustrated"), (2, "Very angry")
    ]
    weighted = sum(p["value"] * p["probability"] for p in score["probabilities"])
    assert abs(score["score"] - weighted) <= 0.01
    assert set(payload["usage"]) == {"input_tokens", "output_tokens"}


def test_openai_answers_match_system_one_for_the_same_question(client: httpx.Client) -> None:
    body = openai_body()
    answers = post(client, "/v1/decisions", body).json()["answers"]
    system_one = {
        "model": "gpt-6-luna",
        "state": body["input"],
        "questions": {
            "is_urgent": {"type": "noul", "instructions": "Does this convey urgency?"},
            "frustration": {
                "type": "score",
                "instructions": "How frustrated is the customer?",
                "criteria": ["Calm", "Frustrated", "Very angry"],
            },
        },
    }
    same = post(client, "/v1/systemone", system_one).json()["answers"]
    assert answers[0]["probability"] == same["is_urgent"]["noul"]
    assert answers[2]["score"] == same["frustration"]["score"]


def test_openai_refusal_keeps_its_name(provider: FauxProvider, client: httpx.Client) -> None:
    body = openai_body()
    del body["questions"][0]["name"]  # unnamed: refused by its index
    provider.set_behaviour(FauxBehaviour(mode="refuse", refuse_questions=("0", "frustration")))
    answers = post(client, "/v1/decisions", body).json()["answers"]
    assert answers[0] == {"type": "refusal", "name": None}
    assert answers[1]["type"] == "choice"
    assert answers[2] == {"type": "refusal", "name": "frustration"}


def test_refuse_everything_in_system_one_is_an_empty_answer_map(
    provider: FauxProvider, client: httpx.Client
) -> None:
    provider.set_behaviour(FauxBehaviour(mode="refuse"))
    response = post(client, "/v1/systemone", system_one_body())
    assert response.status_code == 200
    assert response.json()["answers"] == {}


def test_typesafe_models(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()["models"]
    names = {m["name"] for m in models}
    assert {"faux-1", "jev-1.14", "d1"} <= names
    assert all(set(m) == {"name", "description", "release_date"} for m in models)


def test_openrouter_catalog(client: httpx.Client) -> None:
    data = client.get("/api/v1/models", params={"output_modalities": "decisions"}).json()["data"]
    by_id = {entry["id"]: entry for entry in data}
    assert by_id["typesafe/jev-1.14"]["architecture"]["input_modalities"] == ["text", "image"]
    assert by_id["liquid/d1"]["architecture"]["input_modalities"] == ["text"]
    assert "faux-1" in by_id
    for entry in data:
        assert {"id", "canonical_slug", "context_length", "pricing", "architecture"} <= set(entry)
        assert float(entry["pricing"]["prompt"]) > 0
    assert client.get("/api/v1/models").json() == {"data": []}  # no filter: no decision models


def test_system_one_host_catalog_serves_both_readers(client: httpx.Client) -> None:
    payload = client.get("/v1/models", params={"output_modalities": "decisions"}).json()
    assert "models" in payload
    ids = {(e["id"], e["canonical_slug"]) for e in payload["data"]}
    assert ("jev-1.14", "typesafe/jev-1.14") in ids


def test_digest_is_of_the_parsed_body_whatever_its_bytes(
    provider: FauxProvider, client: httpx.Client
) -> None:
    body = system_one_body()
    loose = b'{ "questions": %s, "model": "jev-latest", "state": "%s" }' % (
        json.dumps(body["questions"], indent=2).encode(),
        body["state"].encode(),
    )
    assert post(client, "/v1/systemone", loose).status_code == 200
    assert post(client, "/v1/systemone", body).status_code == 200
    assert provider.requests() == {digest_of(body): 2}
