"""Replay: the faux answers each request with the response recorded for it, or says loudly
that it has none.

``ReplayStore(directory)`` reads the files ``decisions record`` wrote
(``<request_sha256>.json``, see ``worker.providers.recording``), looked up by the digest of
the request body's canonical JSON, so key order and whitespace do not matter. A recorded
request gets the recorded status, headers and body. Any other gets a 404 whose
``x-decisions-replay-miss`` header and JSON body name its digest and the closest recording,
with what differs (model, questions, state, ...); the transport turns that header into the
provider error's message, so a CI run fails with it instead of inventing an answer. Misses
are kept (``misses()``) and logged.

Files are read when asked for, so recordings added while a server runs are seen.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from worker.providers.recording import (
    RECORDING_FORMAT,
    REPLAY_MISS_HEADER,
    field_digests,
    recording_path,
)

from .outcome import FauxResponse, json_response

__all__ = ["REPLAY_MISS_STATUS", "ReplayMiss", "ReplayStore"]

#: "No recording found": a 4xx, so the call fails definitively and is never retried.
REPLAY_MISS_STATUS: Final = 404
_HEADER_CHARS: Final = 600
#: Fields named first when they differ: what a person changes most often.
_ORDER: Final = ("model", "questions", "state", "input")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayMiss:
    """A request the replay had no recording for."""

    request_sha256: str
    closest: str | None
    differences: tuple[str, ...]
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "request_sha256": self.request_sha256,
            "closest": self.closest,
            "differences": list(self.differences),
            "message": self.message,
        }


class ReplayStore:
    """The recordings of one directory, and the requests that found none."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"replay directory {self.directory} does not exist")
        self._lock = threading.Lock()
        self._misses: list[ReplayMiss] = []

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*.json"))

    def recording(self, digest: str) -> dict[str, Any] | None:
        """The recording of the request with this digest, if there is one."""
        if not all(c in "0123456789abcdef" for c in digest):
            return None
        try:
            document = json.loads(recording_path(self.directory, digest).read_text("utf-8"))
        except FileNotFoundError:
            return None
        return document if _is_recording(document) else None

    def answer(self, digest: str, parsed: Any) -> FauxResponse:
        """The recorded response, or the miss (``REPLAY_MISS_STATUS``) naming the closest."""
        document = self.recording(digest)
        if document is not None:
            return _response(document["response"])
        miss = self._miss(digest, parsed)
        with self._lock:
            self._misses.append(miss)
        logger.warning("%s", miss.message)
        header = miss.message.encode("ascii", "backslashreplace").decode("ascii")
        return json_response(
            REPLAY_MISS_STATUS,
            {"error": {"type": "not_recorded", "message": miss.message}, **miss.as_json()},
            {REPLAY_MISS_HEADER: header[:_HEADER_CHARS]},
        )

    def misses(self) -> list[ReplayMiss]:
        with self._lock:
            return list(self._misses)

    def take_misses(self) -> list[ReplayMiss]:
        """The misses so far, forgotten once taken (a test that expects them says so)."""
        with self._lock:
            taken, self._misses = self._misses, []
            return taken

    # --- the closest recording -----------------------------------------------------------
    def _recordings(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                document = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):
                continue
            if _is_recording(document):
                found.append(document)
        return found

    def _miss(self, digest: str, parsed: Any) -> ReplayMiss:
        head = f"replay: request {digest} is not recorded in {self.directory}"
        recordings = self._recordings()
        if not recordings:
            return ReplayMiss(digest, None, (), f"{head}, which holds no recordings")
        if not isinstance(parsed, dict):
            return ReplayMiss(digest, None, (), f"{head} (its body is not a JSON object)")
        fields, questions = field_digests(parsed)
        best = max(recordings, key=lambda doc: _likeness(doc, fields, questions))
        differences = tuple(_differences(best, parsed, fields, questions))
        closest = str(best["request_sha256"])
        said = "; ".join(differences) or "nothing visible (recorded by another version?)"
        return ReplayMiss(
            digest, closest, differences,
            f"{head}; the closest recorded request is {closest}, which differs in {said}",
        )


def _is_recording(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and document.get("format") == RECORDING_FORMAT
        and isinstance(document.get("response"), dict)
        and isinstance(document.get("request"), dict)
    )


def _response(recorded: Mapping[str, Any]) -> FauxResponse:
    headers = {str(k): str(v) for k, v in (recorded.get("headers") or {}).items()}
    if "body" in recorded:
        body = json.dumps(recorded["body"], separators=(",", ":"), ensure_ascii=False).encode()
        headers.setdefault("content-type", "application/json")
    elif "body_text" in recorded:
        body = str(recorded["body_text"]).encode("utf-8")
    else:
        body = base64.b64decode(recorded.get("body_base64", ""))
    return FauxResponse(int(recorded["status"]), headers, body)


def _likeness(
    document: Mapping[str, Any], fields: Mapping[str, str], questions: Mapping[str, str]
) -> tuple[int, float]:
    recorded = document["request"].get("fields") or {}
    same_fields = sum(1 for k, v in fields.items() if recorded.get(k) == v)
    rq = document["request"].get("question_digests") or {}
    names = set(rq) | set(questions)
    same_questions = sum(1 for n in names if rq.get(n) == questions.get(n)) / max(len(names), 1)
    return same_fields, same_questions


def _differences(
    document: Mapping[str, Any],
    parsed: Mapping[str, Any],
    fields: Mapping[str, str],
    questions: Mapping[str, str],
) -> list[str]:
    request = document["request"]
    recorded: Mapping[str, str] = request.get("fields") or {}
    names = sorted(set(recorded) | set(fields), key=lambda n: (n not in _ORDER, _rank(n), n))
    out: list[str] = []
    for name in names:
        if recorded.get(name) == fields.get(name):
            continue
        if name not in fields:
            out.append(f"{name} (recorded, not asked)")
        elif name not in recorded:
            out.append(f"{name} (asked, not recorded)")
        elif name == "model":
            out.append(f"model ({request.get('model')!r} recorded, {parsed.get('model')!r} asked)")
        elif name == "questions":
            out.append(_question_differences(request.get("question_digests") or {}, questions))
        else:
            out.append(name)
    return out


def _rank(name: str) -> int:
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


def _question_differences(recorded: Mapping[str, str], asked: Mapping[str, str]) -> str:
    changed = sorted(n for n in asked if n in recorded and recorded[n] != asked[n])
    new = sorted(n for n in asked if n not in recorded)
    gone = sorted(n for n in recorded if n not in asked)
    parts = []
    if changed:
        parts.append("changed " + ", ".join(map(repr, changed)))
    if new:
        parts.append("not recorded " + ", ".join(map(repr, new)))
    if gone:
        parts.append("recorded, not asked " + ", ".join(map(repr, gone)))
    return "questions (" + "; ".join(parts or ["their order"]) + ")"
