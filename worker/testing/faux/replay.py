"""Replay: the faux answers each request with the response recorded for it, or says loudly
that it has none.

``ReplayStore(directory)`` reads the files ``decisions record`` wrote
(``<request_sha256>.json``, see ``worker.testing.recording``), looked up by the digest of
the request body's canonical JSON, so key order and whitespace do not matter. A recorded
request gets the recorded status, headers and body. Any other gets a 404 whose
``x-decisions-replay-miss`` header and JSON body name its digest and the closest recording,
with what differs (model, questions, state, ...); the transport turns that header into the
provider error's message, so a CI run fails with it instead of inventing an answer. Misses
are kept (``misses()``) and logged.

A recording that cannot be used (not JSON or too deep to parse, over ``MAX_RECORDING_BYTES``,
not a recording, a response that cannot be sent: a status outside 200 to 599, a body on a
204 or 304, a header HTTP/1.1 cannot carry or one that frames the message, too many headers,
bad base64) is a miss too, naming the file and what is wrong: the job gets the usual miss
report, never a 500 or a dropped connection.

Recordings are indexed, not re-read: the closest recording is found among summaries (each
request's field and question digests) kept per file and refreshed from the directory's
listing when a file appears, changes (modification time, size) or goes, so recordings added
while a server runs are seen and each file is parsed once per version. A hit reads its one
file.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from worker.providers.observers import REPLAY_MISS_HEADER
from worker.testing.recording import RECORDING_FORMAT, WIRE_HEADERS, field_digests, recording_path

from .outcome import FauxResponse, json_response

__all__ = [
    "MAX_RECORDING_BYTES",
    "REPLAY_MISS_STATUS",
    "ReplayMiss",
    "ReplayStore",
    "UnusableRecording",
]

#: "No recording found": a 4xx, so the call fails definitively and is never retried.
REPLAY_MISS_STATUS: Final = 404
_HEADER_CHARS: Final = 600
#: Fields named first when they differ: what a person changes most often.
_ORDER: Final = ("model", "questions", "state", "input")
#: Unreadable recordings named in a miss's message (the rest are counted).
_NAMED_UNREADABLE: Final = 3
_DIGEST = re.compile(r"[0-9a-f]{1,128}")
#: RFC 9110 token characters (a header name) and a value HTTP/1.1 can carry.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: A recording file's largest size: twice the longest answer a worker reads by default
#: (DECISIONS_MAX_RESPONSE_BYTES, 16 MiB), so that one recorded indented or in base64 fits.
#: A file is read whole and parsed on the faux's event loop, for each request it answers:
#: a larger one is no recording, and reading it would stall every request the faux serves.
MAX_RECORDING_BYTES: Final = 32 * 1024 * 1024
#: Recorded headers' largest total (names and values). A client drops the connection on a
#: response head past its own limit (httpcore's: 100 kB; many take 8 to 16 kB); a provider's
#: recorded headers are a kilobyte or two.
_MAX_HEADER_BYTES: Final = 16 * 1024
#: Headers that frame the message or manage the connection, hop by hop: the server sets
#: its own content-length, so a recorded one (never written by ``decisions record``) would
#: contradict the body it sends and break the connection.
_FRAMING_HEADERS: Final = WIRE_HEADERS | {"te", "trailer", "upgrade", "proxy-connection"}
#: Statuses that carry no body (RFC 9110): a recorded body on one cannot be sent.
_NO_BODY_STATUSES: Final = frozenset({204, 304})

logger = logging.getLogger(__name__)


class UnusableRecording(ValueError):
    """A recording file that cannot be replayed; the message says why."""


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


@dataclass(frozen=True)
class _Indexed:
    """One file as last read: its stamp, and its request summary or why it is unusable."""

    stamp: tuple[int, int]
    summary: dict[str, Any] | None
    problem: str | None


class ReplayStore:
    """The recordings of one directory, and the requests that found none."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"replay directory {self.directory} does not exist")
        self._lock = threading.Lock()
        self._misses: list[ReplayMiss] = []
        self._index_lock = threading.Lock()
        self._index: dict[str, _Indexed] = {}
        #: Files parsed to (re)build the index: a test sees that a miss re-reads nothing.
        self.files_read = 0

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*.json"))

    def recording(self, digest: str) -> dict[str, Any] | None:
        """The recording of the request with this digest, if there is one;
        ``UnusableRecording`` if its file cannot be replayed."""
        if not _DIGEST.fullmatch(digest):
            return None
        path = recording_path(self.directory, digest)
        try:
            text = _read_text(path)
        except FileNotFoundError:
            return None
        except UnusableRecording:
            raise
        except (OSError, ValueError) as exc:
            raise UnusableRecording(f"cannot be read ({type(exc).__name__})") from None
        return _document(text)

    def answer(self, digest: str, parsed: Any) -> FauxResponse:
        """The recorded response, or the miss (``REPLAY_MISS_STATUS``) naming the closest or
        the unusable file."""
        try:
            document = self.recording(digest)
            if document is not None:
                return _response(document["response"])
            miss = self._miss(digest, parsed)
        except UnusableRecording as exc:
            path = recording_path(self.directory, digest)
            miss = ReplayMiss(
                digest, None, (),
                f"replay: the recording of request {digest} ({path}) is unusable: {exc}; "
                "record it again (decisions record) or delete it",
            )
        except OSError as exc:
            miss = ReplayMiss(
                digest, None, (),
                f"replay: request {digest}: the directory {self.directory} cannot be read "
                f"({type(exc).__name__})",
            )
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

    # --- the index -------------------------------------------------------------------------
    def _indexed(self) -> dict[str, _Indexed]:
        """Every recording file's entry, re-reading only files new or changed since."""
        with self._index_lock:
            fresh: dict[str, _Indexed] = {}
            with os.scandir(self.directory) as listing:
                for item in listing:
                    if not item.name.endswith(".json") or item.name.startswith("."):
                        continue
                    try:
                        stat = item.stat()
                    except OSError:
                        continue  # gone since the listing
                    stamp = (stat.st_mtime_ns, stat.st_size)
                    known = self._index.get(item.name)
                    fresh[item.name] = (
                        known if known is not None and known.stamp == stamp
                        else self._read(Path(item.path), stamp)
                    )
            self._index = fresh
            return dict(fresh)

    def _read(self, path: Path, stamp: tuple[int, int]) -> _Indexed:
        self.files_read += 1
        try:
            document = _document(_read_text(path))
            summary = _summary(document)
        except (OSError, ValueError) as exc:
            problem = str(exc) if isinstance(exc, UnusableRecording) else type(exc).__name__
            return _Indexed(stamp, None, problem)
        return _Indexed(stamp, summary, None)

    def _miss(self, digest: str, parsed: Any) -> ReplayMiss:
        head = f"replay: request {digest} is not recorded in {self.directory}"
        index = self._indexed()
        recordings = [e.summary for e in index.values() if e.summary is not None]
        unusable = sorted(name for name, e in index.items() if e.summary is None)
        if unusable:
            named = ", ".join(unusable[:_NAMED_UNREADABLE])
            more = len(unusable) - _NAMED_UNREADABLE
            head += f" ({len(unusable)} unusable recording(s) skipped: {named}"
            head += f" and {more} more)" if more > 0 else ")"
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


def _read_text(path: Path) -> str:
    """The file's text; ``UnusableRecording`` past ``MAX_RECORDING_BYTES`` (read no further)."""
    with path.open("rb") as file:
        data = file.read(MAX_RECORDING_BYTES + 1)
    if len(data) > MAX_RECORDING_BYTES:
        raise UnusableRecording(
            f"it is over {MAX_RECORDING_BYTES // (1024 * 1024)} MiB, more than a recording holds"
        )
    return data.decode("utf-8")


def _document(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError:
        raise UnusableRecording("it is not JSON") from None
    except RecursionError:
        raise UnusableRecording("it is nested too deep to be read") from None
    if not _is_recording(document):
        raise UnusableRecording(f"it is not a {RECORDING_FORMAT} recording")
    assert isinstance(document, dict)
    return document


def _summary(document: Mapping[str, Any]) -> dict[str, Any]:
    """What finding the closest recording needs of one, and no more (no response body)."""
    request = document["request"]
    fields = request.get("fields") or {}
    questions = request.get("question_digests") or {}
    if not (_str_map(fields) and _str_map(questions)):
        raise UnusableRecording("its request digests are not string maps")
    return {
        "request_sha256": str(document.get("request_sha256")),
        "request": {"fields": fields, "question_digests": questions, "model": request.get("model")},
    }


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _is_recording(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and document.get("format") == RECORDING_FORMAT
        and isinstance(document.get("response"), dict)
        and isinstance(document.get("request"), dict)
    )


def _response(recorded: Mapping[str, Any]) -> FauxResponse:
    """The recorded response as the faux sends it; ``UnusableRecording`` if it cannot be."""
    status = recorded.get("status")
    # An informational status (1xx) is no final answer: a client waits on past it.
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise UnusableRecording(f"its status {str(status)[:20]!r} is not a final HTTP status")
    raw_headers = recorded.get("headers") or {}
    if not isinstance(raw_headers, dict):
        raise UnusableRecording("its headers are not an object")
    headers = {str(k): str(v) for k, v in raw_headers.items()}
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise UnusableRecording(f"its header {name[:40]!r} cannot be sent over HTTP/1.1")
        if name.lower() in _FRAMING_HEADERS:
            raise UnusableRecording(
                f"its header {name!r} frames the message or the connection, which the faux "
                "does itself"
            )
    if sum(len(name) + len(value) for name, value in headers.items()) > _MAX_HEADER_BYTES:
        raise UnusableRecording(
            f"its headers are over {_MAX_HEADER_BYTES // 1024} kB, more than clients take"
        )
    if "body" in recorded:
        try:
            text = json.dumps(recorded["body"], separators=(",", ":"), ensure_ascii=False)
            body = text.encode()
        except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
            raise UnusableRecording("its body cannot be encoded") from None
        headers.setdefault("content-type", "application/json")
    elif "body_text" in recorded:
        try:
            body = str(recorded["body_text"]).encode("utf-8")
        except UnicodeEncodeError:
            raise UnusableRecording("its body_text is not UTF-8") from None
    else:
        try:
            body = base64.b64decode(str(recorded.get("body_base64", "")), validate=True)
        except (binascii.Error, ValueError):
            raise UnusableRecording("its body_base64 is not base64") from None
    if body and status in _NO_BODY_STATUSES:
        raise UnusableRecording(f"it has a body, which a {status} response cannot carry")
    return FauxResponse(status, headers, body)


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
