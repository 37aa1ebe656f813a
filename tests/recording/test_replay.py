"""Replay: a recorded request gets the recorded status, headers and body (in process and on
a socket), whatever its key order and whitespace; any other request fails loudly, naming its
digest and the closest recording with what differs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.canonical import canonical_bytes
from shared.errors import DecisionProviderError
from worker.providers import ProviderResult
from worker.providers.observers import REPLAY_MISS_HEADER, observing
from worker.providers.systemone import FAUX_IN_PROCESS_URL
from worker.testing.faux import FauxBehaviour, FauxProvider, FauxServer
from worker.testing.faux.replay import REPLAY_MISS_STATUS, ReplayStore
from worker.testing.recording import Recorder

from .support import MODEL, STATE, decide, questions, recordings, request, settings_at

AUTH = {"Authorization": "Bearer sk-test"}


@dataclass
class Recorded:
    directory: Path
    first: ProviderResult
    second: ProviderResult

    def document(self, result: ProviderResult) -> dict[str, Any]:
        return recordings(self.directory)[result.receipt.request_sha256]


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """Two requests recorded from a faux standing in for OpenRouter."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    directory = tmp_path / "recordings"
    with FauxServer() as host, observing(Recorder(directory)):
        settings = settings_at(host.url)
        first = decide(settings, "openrouter", request())
        second = decide(settings, "openrouter", request(state="Where is my invoice?"))
    return Recorded(directory, first, second)


@pytest.fixture
def replaying(recorded: Recorded) -> Iterator[FauxServer]:
    with FauxServer(FauxProvider(replay=recorded.directory)) as server:
        yield server


def _body(**changes: Any) -> dict[str, Any]:
    return {"model": MODEL, "state": STATE, "questions": questions(), **changes}


def test_the_in_process_transport_replays_the_recorded_answer(recorded: Recorded) -> None:
    replay = FauxProvider(replay=recorded.directory)
    for original in (recorded.first, recorded.second):
        again = decide(
            settings_at(FAUX_IN_PROCESS_URL), "openrouter", request(
                state=None if original is recorded.first else "Where is my invoice?"
            ),
            transport=replay.transport(),
        )
        # The faux makes up a fresh id for every answer: the same id is the recorded one.
        assert again.receipt.decision_id == original.receipt.decision_id
        assert again.answers == original.answers
        assert again.receipt.request_sha256 == original.receipt.request_sha256
    assert replay.total() == 2 and replay.replay_misses() == []


def test_the_server_replays_status_headers_and_body(
    recorded: Recorded, replaying: FauxServer
) -> None:
    doc = recorded.document(recorded.first)
    with httpx.Client(base_url=replaying.url) as client:
        response = client.post(
            "/api/v1/systemone", content=canonical_bytes(_body()), headers=AUTH
        )
    assert response.status_code == doc["response"]["status"] == 200
    assert response.json() == doc["response"]["body"]
    for name, value in doc["response"]["headers"].items():
        assert response.headers[name] == value


def test_key_order_and_whitespace_do_not_matter(recorded: Recorded, replaying: FauxServer) -> None:
    body = _body()
    shuffled = {k: body[k] for k in reversed(list(body))}
    shuffled["questions"] = {k: dict(reversed(v.items())) for k, v in body["questions"].items()}
    raw = json.dumps(shuffled, indent=3).encode()
    assert raw != canonical_bytes(body)
    with httpx.Client(base_url=replaying.url) as client:
        response = client.post("/api/v1/systemone", content=raw, headers=AUTH)
    assert response.status_code == 200
    assert response.json()["id"] == recorded.first.receipt.decision_id


@pytest.mark.parametrize(
    ("changed", "difference"),
    [
        ({"model": "other/model"}, f"model ({MODEL!r} recorded, 'other/model' asked)"),
        ({"state": {"body": "Help! My payouts have been failing for 4 days."}}, "state"),
    ],
    ids=["model", "state"],
)
def test_an_unrecorded_request_fails_naming_its_digest_and_the_closest(
    recorded: Recorded,
    replaying: FauxServer,
    changed: dict[str, Any],
    difference: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    ask = request(model=changed.get("model", MODEL), state=changed.get("state"))
    with pytest.raises(DecisionProviderError) as info:
        decide(settings_at(replaying.url), "openrouter", ask)
    error = info.value
    digest = error.receipt.request_sha256
    assert error.code == "invalid_request" and error.status_code == REPLAY_MISS_STATUS
    assert error.receipt.status == "failed", "a miss is definitive: never sent again"
    closest = recorded.first.receipt.request_sha256
    assert f"request {digest} is not recorded" in str(error)
    assert f"closest recorded request is {closest}, which differs in {difference}" in str(error)
    [miss] = replaying.provider.replay_misses()
    assert (miss.request_sha256, miss.closest) == (digest, closest)


def test_a_changed_question_is_named(recorded: Recorded, replaying: FauxServer) -> None:
    qs = questions()
    qs["is_urgent"]["instructions"] = "Is this urgent?"
    qs["frustration"] = {"type": "score", "instructions": "How angry?", "criteria": ["a", "b"]}
    del qs["department"]
    with httpx.Client(base_url=replaying.url) as client:
        response = client.post(
            "/api/v1/systemone", content=canonical_bytes(_body(questions=qs)), headers=AUTH
        )
    assert response.status_code == REPLAY_MISS_STATUS
    assert response.json()["closest"] == recorded.first.receipt.request_sha256
    assert response.json()["differences"] == [
        "questions (changed 'is_urgent'; not recorded 'frustration'; "
        "recorded, not asked 'department')"
    ]
    assert response.headers[REPLAY_MISS_HEADER] == response.json()["message"]
    with httpx.Client(base_url=replaying.url) as client:
        listed = client.get("/_faux/replay").json()
    assert listed["recordings"] == 2
    assert [m["message"] for m in listed["misses"]] == [response.json()["message"]]


def test_an_empty_directory_says_it_holds_no_recordings(tmp_path: Path) -> None:
    replay = ReplayStore(tmp_path)
    with httpx.Client(
        transport=FauxProvider(replay=replay).transport(), base_url="http://faux.test"
    ) as client:
        response = client.post("/v1/systemone", content=canonical_bytes(_body()), headers=AUTH)
    assert response.status_code == REPLAY_MISS_STATUS
    assert response.json()["message"].endswith(f"{tmp_path}, which holds no recordings")
    assert len(replay.take_misses()) == 1 and replay.misses() == []


def test_a_recorded_failure_is_replayed_as_that_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    host_behaviour = FauxBehaviour(mode="status", status_code=402)
    with (
        FauxServer(behaviour=host_behaviour) as host,
        observing(Recorder(tmp_path)),
        pytest.raises(DecisionProviderError) as recorded_error,
    ):
        decide(settings_at(host.url), "openrouter", request())
    replay = FauxProvider(replay=tmp_path)
    with pytest.raises(DecisionProviderError) as replayed:
        decide(
            settings_at(FAUX_IN_PROCESS_URL), "openrouter", request(), transport=replay.transport()
        )
    assert (replayed.value.code, replayed.value.status_code) == ("invalid_request", 402)
    assert str(replayed.value) == str(recorded_error.value)


def test_failure_modes_still_apply_while_replaying(
    recorded: Recorded, replaying: FauxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    replaying.provider.update_behaviour(mode="status", status_code=503, fail_first=1)
    settings = settings_at(replaying.url)
    with pytest.raises(DecisionProviderError) as info:
        decide(settings, "openrouter", request())
    assert info.value.code == "outcome_unknown"
    again = decide(settings, "openrouter", request())
    assert again.receipt.decision_id == recorded.first.receipt.decision_id


def test_a_replay_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FauxProvider(replay=tmp_path / "missing")
