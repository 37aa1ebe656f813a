"""Replay survives bad recordings and reads each file once: a corrupt recording is a miss
naming the file (over a real socket: a 404 with the miss header, never a 500 or a dropped
connection, so the provider error is the usual miss report), an unusable file elsewhere in
the directory is skipped and named, and misses are answered from an index that re-reads
only files that appeared or changed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.canonical import canonical_bytes
from shared.errors import DecisionProviderError
from worker.providers.observers import REPLAY_MISS_HEADER, observing
from worker.testing.faux import FauxProvider, FauxServer
from worker.testing.faux.replay import MAX_RECORDING_BYTES, REPLAY_MISS_STATUS, ReplayStore
from worker.testing.recording import Recorder

from .support import MODEL, STATE, decide, questions, request, settings_at

AUTH = {"Authorization": "Bearer sk-test"}


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """One request recorded from a faux standing in for OpenRouter: (directory, digest)."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    directory = tmp_path / "recordings"
    with FauxServer() as host, observing(Recorder(directory)):
        result = decide(settings_at(host.url), "openrouter", request())
    return directory, result.receipt.request_sha256


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def _status(doc: dict[str, Any]) -> None:
    doc["response"]["status"] = "two hundred"


def _header(doc: dict[str, Any]) -> None:
    doc["response"]["headers"]["x-evil"] = "line\r\nSet-Cookie: injected=1"


def _non_latin_header(doc: dict[str, Any]) -> None:
    doc["response"]["headers"]["x-name"] = "Zoë ☃"


def _base64(doc: dict[str, Any]) -> None:
    doc["response"].pop("body")
    doc["response"]["body_base64"] = "not base64 at all!"


def _shape(doc: dict[str, Any]) -> None:
    doc["response"] = ["not", "an", "object"]


def _response_edit(
    *, status: int | None = None, headers: dict[str, str] | None = None
) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        if status is not None:
            doc["response"]["status"] = status
        doc["response"]["headers"].update(headers or {})

    return change


def _deep(path: Path) -> None:
    # Deeper than Python's recursion limit: json.loads raised RecursionError (a 500).
    path.write_text(
        '{"format": "decisions-recording/1", "request": {}, "response": {"status": 200, '
        '"body": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    )


def _oversize(path: Path) -> None:
    document = json.loads(path.read_text())
    document["padding"] = "x" * (MAX_RECORDING_BYTES + 1)
    path.write_text(json.dumps(document))


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "not-utf8": lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()),
    "empty": lambda p: p.write_bytes(b""),
    "status": lambda p: _edit(p, _status),
    "header-crlf": lambda p: _edit(p, _header),
    "header-not-latin1": lambda p: _edit(p, _non_latin_header),
    "base64": lambda p: _edit(p, _base64),
    "shape": lambda p: _edit(p, _shape),
    # Hand-edited recordings that broke the connection or answered 500 before.
    "deep-json": _deep,
    "oversize": _oversize,
    "content-length": lambda p: _edit(p, _response_edit(headers={"content-length": "99999"})),
    "transfer-encoding": lambda p: _edit(
        p, _response_edit(headers={"Transfer-Encoding": "chunked"})
    ),
    "connection": lambda p: _edit(p, _response_edit(headers={"connection": "close"})),
    "status-101": lambda p: _edit(p, _response_edit(status=101)),
    "status-204-body": lambda p: _edit(p, _response_edit(status=204)),
    "status-304-body": lambda p: _edit(p, _response_edit(status=304)),
    "huge-header": lambda p: _edit(p, _response_edit(headers={"x-a": "a" * 200_000})),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_recording_is_a_miss_naming_the_file(
    recorded: tuple[Path, str], corruption: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, digest = recorded
    path = directory / f"{digest}.json"
    CORRUPTIONS[corruption](path)
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    with FauxServer(FauxProvider(replay=directory)) as server:
        # Over a real socket: an answer, never a 500 or a dropped connection.
        body = {"model": MODEL, "state": STATE, "questions": questions()}
        with httpx.Client(base_url=server.url) as client:
            raw = client.post("/api/v1/systemone", content=canonical_bytes(body), headers=AUTH)
        assert raw.status_code == REPLAY_MISS_STATUS
        assert str(path) in raw.headers[REPLAY_MISS_HEADER]
        # Through the provider: the job's error is the miss report, naming the file.
        with pytest.raises(DecisionProviderError) as info:
            decide(settings_at(server.url), "openrouter", request())
        assert info.value.code == "invalid_request"
        assert info.value.status_code == REPLAY_MISS_STATUS
        assert f"the recording of request {digest} ({path}) is unusable" in str(info.value)
        assert len(server.provider.replay_misses()) == 2


def test_an_unusable_file_elsewhere_is_skipped_and_named(
    recorded: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, digest = recorded
    (directory / "0badc0de.json").write_text("{not json")
    (directory / "0badf00d.json").write_text(json.dumps({"format": "other"}))
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    replay = FauxProvider(replay=directory)
    with pytest.raises(DecisionProviderError) as info:
        decide(
            settings_at("http://faux.test"),
            "openrouter",
            request(model="other/model"),
            transport=replay.transport(),
        )
    message = str(info.value)
    assert "2 unusable recording(s) skipped: 0badc0de.json, 0badf00d.json" in message
    assert f"the closest recorded request is {digest}" in message


def _miss(store: ReplayStore, model: str) -> str:
    body = {"model": model, "state": STATE, "questions": questions()}
    response = store.answer("f" * 64, body)
    assert response.status == REPLAY_MISS_STATUS
    return json.loads(response.body)["message"]


def test_misses_are_answered_from_an_index_reread_only_where_files_changed(
    recorded: tuple[Path, str],
) -> None:
    directory, digest = recorded
    store = ReplayStore(directory)
    assert "differs in model" in _miss(store, "a/model")
    assert store.files_read == 1
    for _ in range(5):
        _miss(store, "b/model")
    assert store.files_read == 1, "a miss re-reads nothing that did not change"

    # A recording added while serving is seen; a changed one is read again; a removed one
    # is forgotten.
    added = directory / ("a" * 64 + ".json")
    document = json.loads((directory / f"{digest}.json").read_text())
    document["request_sha256"] = "a" * 64
    document["request"]["fields"]["model"] = "0" * 64
    added.write_text(json.dumps(document))
    _miss(store, "c/model")
    assert store.files_read == 2
    original = directory / f"{digest}.json"
    stat = original.stat()
    original.write_text(original.read_text() + "\n")
    os.utime(original, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _miss(store, "d/model")
    assert store.files_read == 3
    added.unlink()
    assert "closest recorded request is " + digest in _miss(store, MODEL + "x")
    assert store.files_read == 3


def test_a_recording_added_while_serving_is_replayed(
    recorded: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, digest = recorded
    empty = tmp_path / "later"
    empty.mkdir()
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    replay = FauxProvider(replay=empty)
    settings = settings_at("http://faux.test")
    with pytest.raises(DecisionProviderError):
        decide(settings, "openrouter", request(), transport=replay.transport())
    (empty / f"{digest}.json").write_bytes((directory / f"{digest}.json").read_bytes())
    again = decide(settings, "openrouter", request(), transport=replay.transport())
    assert again.receipt.request_sha256 == digest
