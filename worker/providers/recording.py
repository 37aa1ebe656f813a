"""Recording every response a provider receives, so CI can replay them without keys.

The transport calls ``observe`` once for each response that arrives, whatever its status,
before it is classified. Observers are a ``Recorder`` for ``settings.record_dir`` when that
is set (``DECISIONS_RECORD_DIR``, which ``decisions record`` sets for its command), and any a
caller installs with ``observing(fn)`` (the pytest plugin counts live requests this way). A
failing observer is logged and ignored: a paid answer is never lost to a full disk. While
``recording_paused()`` holds, the settings' recorder writes nothing (the plugin pauses it for
tests that talk to the faux, so a recording run keeps real answers only).

A recording is one JSON file per request, ``DIR/<request_sha256>.json``, the digest of the
request body's canonical JSON (what receipts carry), so it survives key order and whitespace::

    {"format": "decisions-recording/1", "request_sha256": "...", "provider": "openrouter",
     "recorded_at": "...",
     "request": {"method": "POST", "path": "/api/v1/systemone", "model": "...",
                 "questions": {...}, "fields": {"model": "<sha256>", ...},
                 "question_digests": {"is_urgent": "<sha256>", ...}},
     "response": {"status": 200, "headers": {...}, "body": {...}}}

``model`` and ``questions`` are for people; ``fields`` and ``question_digests`` (digests of
each top-level field and each question) let a replay name what differs about a request it
has no recording for. The state itself is not kept, only its digest. A later response for
the same digest replaces the file, except that a failure never replaces a 2xx.

What never reaches a file: request headers (so no auth header, by construction); the key,
wherever a hostile host echoes it (every occurrence, in headers or body, becomes
``[redacted]``); response headers that carry credentials (``ALWAYS_SECRET_HEADERS``, the
provider's auth header, ``settings.secret_headers``); and JSON fields the operator names in
``settings.secret_fields`` (dotted paths from the body's root, ``*`` for any key or item,
applied to the recorded request parts and to the response body).

``REPLAY_MISS_HEADER`` is the other half of the contract: a replay that has no recording for
a request answers 404 with this header naming the digest and the closest recording, and the
transport surfaces it (``replay_miss``) as the error's message.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from shared.canonical import digest_of, sha256_hex
from shared.settings import get_settings

__all__ = [
    "ALWAYS_SECRET_HEADERS",
    "RECORDING_FORMAT",
    "REDACTED",
    "REPLAY_MISS_HEADER",
    "ObservedResponse",
    "Recorder",
    "ResponseObserver",
    "field_digests",
    "observe",
    "observing",
    "recording_path",
    "recording_paused",
    "redact_fields",
    "replay_miss",
    "request_digest",
]

logger = logging.getLogger(__name__)

RECORDING_FORMAT: Final = "decisions-recording/1"
REDACTED: Final = "[redacted]"
REPLAY_MISS_HEADER: Final = "x-decisions-replay-miss"
#: Response headers that may carry a credential or a session, whatever the operator says.
ALWAYS_SECRET_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "cookie", "set-cookie",
     "www-authenticate", "proxy-authenticate"}
)
#: Headers describing the bytes on the wire, not the body we keep (it is stored decoded).
_WIRE_HEADERS: Final = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)
_MAX_MISS_CHARS: Final = 600


@dataclass(frozen=True)
class ObservedResponse:
    """One response as it arrived, with what is needed to keep the key out of a file."""

    provider: str
    method: str
    url: str
    request_body: bytes | None
    #: The request's headers other than auth (the transport adds auth per attempt).
    request_headers: Mapping[str, str]
    status: int
    headers: httpx.Headers
    body: bytes
    key: str | None = field(default=None, repr=False)
    auth_header: str | None = None


ResponseObserver = Callable[[ObservedResponse], None]
_O = TypeVar("_O", bound=ResponseObserver)

_observers: list[ResponseObserver] = []
_observers_lock = threading.Lock()
_pauses = 0


@contextlib.contextmanager
def observing(observer: _O) -> Iterator[_O]:
    """Call ``observer`` with every response the providers of this process receive."""
    with _observers_lock:
        _observers.append(observer)
    try:
        yield observer
    finally:
        with _observers_lock:
            _observers.remove(observer)


@contextlib.contextmanager
def recording_paused() -> Iterator[None]:
    """No response is written to ``settings.record_dir`` meanwhile, from any thread."""
    global _pauses
    with _observers_lock:
        _pauses += 1
    try:
        yield
    finally:
        with _observers_lock:
            _pauses -= 1


def observe(
    provider: str,
    method: str,
    url: str,
    request_body: bytes | None,
    request_headers: Mapping[str, str],
    response: httpx.Response,
    *,
    key: str | None,
    auth_header: str | None,
) -> None:
    """The transport's hook: hand a response that arrived to every observer. Never raises."""
    recorder = _settings_recorder()
    with _observers_lock:
        observers: list[ResponseObserver] = list(_observers)
        if recorder is not None and not _pauses:
            observers.append(recorder)
    if not observers:
        return
    observed = ObservedResponse(
        provider, method, url, request_body, request_headers, response.status_code,
        response.headers, response.content, key, auth_header,
    )
    for observer in observers:
        try:
            observer(observed)
        except Exception as exc:
            logger.warning(
                "provider %s: a response observer failed (%s); the call goes on",
                provider, type(exc).__name__,
            )


def _settings_recorder() -> Recorder | None:
    settings = get_settings()
    if settings.record_dir is None:
        return None
    return _recorder(
        str(settings.record_dir), tuple(settings.secret_headers), tuple(settings.secret_fields)
    )


@lru_cache(maxsize=8)
def _recorder(directory: str, headers: tuple[str, ...], fields: tuple[str, ...]) -> Recorder:
    return Recorder(Path(directory), secret_headers=headers, secret_fields=fields)


# --- digests -----------------------------------------------------------------------------


def _parse(body: bytes | None) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def request_digest(body: bytes | None) -> str:
    """``request_sha256``: SHA-256 of the body's canonical JSON (of the raw bytes if not JSON)."""
    parsed = _parse(body)
    if parsed is None:
        return sha256_hex(body or b"")
    return digest_of(parsed)


def field_digests(body: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Digests of each top-level field, and of each question (by id, name or position)."""
    if not isinstance(body, dict):
        return {}, {}
    fields = {name: digest_of(value) for name, value in body.items()}
    questions = body.get("questions")
    per_question: dict[str, str] = {}
    if isinstance(questions, dict):
        per_question = {str(qid): digest_of(q) for qid, q in questions.items()}
    elif isinstance(questions, list):
        for index, q in enumerate(questions):
            name = q.get("name") if isinstance(q, dict) else None
            per_question[str(name) if name is not None else str(index)] = digest_of(q)
    return fields, per_question


def recording_path(directory: Path, digest: str) -> Path:
    return directory / f"{digest}.json"


# --- redaction ---------------------------------------------------------------------------


def _key_forms(key: str | None) -> tuple[str, ...]:
    if not key:
        return ()
    return tuple({key, quote(key, safe="")})


def _scrub_text(text: str, forms: tuple[str, ...]) -> str:
    for form in forms:
        text = text.replace(form, REDACTED)
    return text


def _scrub_json(value: Any, forms: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return _scrub_text(value, forms)
    if isinstance(value, dict):
        return {_scrub_text(str(k), forms): _scrub_json(v, forms) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v, forms) for v in value]
    return value


def _redact_path(value: Any, path: list[str]) -> Any:
    if not path:
        return REDACTED
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {
            k: _redact_path(v, rest) if head in ("*", k) else v for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _redact_path(v, rest) if head == "*" or head == str(i) else v
            for i, v in enumerate(value)
        ]
    return value


def redact_fields(value: Any, paths: Iterable[str]) -> Any:
    for path in paths:
        parts = [p for p in path.split(".") if p]
        if parts:
            value = _redact_path(value, parts)
    return value


# --- the recorder ------------------------------------------------------------------------


class Recorder:
    """Writes each observed response to ``directory/<request_sha256>.json`` (atomically)."""

    def __init__(
        self,
        directory: Path,
        *,
        secret_headers: Iterable[str] = (),
        secret_fields: Iterable[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self.secret_headers = frozenset(h.lower() for h in secret_headers) | ALWAYS_SECRET_HEADERS
        self.secret_fields = tuple(secret_fields)
        self._lock = threading.Lock()

    def __call__(self, observed: ObservedResponse) -> None:
        self.record(observed)

    def record(self, observed: ObservedResponse) -> Path | None:
        """Write the recording; ``None`` when a stored 2xx is kept over a failure."""
        digest = request_digest(observed.request_body)
        document = self.document(observed, digest)
        path = recording_path(self.directory, digest)
        with self._lock:
            if not 200 <= observed.status < 300 and _stored_status_ok(path):
                return None
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return path

    def document(self, observed: ObservedResponse, digest: str) -> dict[str, Any]:
        forms = _key_forms(observed.key)
        parsed = _parse(observed.request_body)
        fields, per_question = field_digests(parsed)
        request: dict[str, Any] = {
            "method": observed.method.upper(),
            "path": urlsplit(observed.url).path,
        }
        if isinstance(parsed, dict):
            shown = {k: parsed[k] for k in ("model", "questions") if k in parsed}
            request.update(_scrub_json(redact_fields(shown, self.secret_fields), forms))
        request["fields"] = fields
        request["question_digests"] = per_question
        return {
            "format": RECORDING_FORMAT,
            "request_sha256": digest,
            "provider": observed.provider,
            "recorded_at": datetime.now(UTC).isoformat(),
            "request": request,
            "response": {
                "status": observed.status,
                "headers": self._headers(observed, forms),
                **self._body(observed.body, forms),
            },
        }

    def _headers(self, observed: ObservedResponse, forms: tuple[str, ...]) -> dict[str, str]:
        dropped = self.secret_headers | _WIRE_HEADERS
        if observed.auth_header:
            dropped = dropped | {observed.auth_header.lower()}
        kept: dict[str, str] = {}
        for name, value in observed.headers.multi_items():
            lowered = name.lower()
            if lowered in dropped:
                continue
            value = _scrub_text(value, forms)
            kept[lowered] = f"{kept[lowered]}, {value}" if lowered in kept else value
        return kept

    def _body(self, body: bytes, forms: tuple[str, ...]) -> dict[str, Any]:
        parsed = _parse(body)
        if parsed is not None or body.strip() == b"null":
            return {"body": _scrub_json(redact_fields(parsed, self.secret_fields), forms)}
        try:
            return {"body_text": _scrub_text(body.decode("utf-8"), forms)}
        except UnicodeDecodeError:
            raw = body
            for form in forms:
                raw = raw.replace(form.encode(), REDACTED.encode())
            return {"body_base64": base64.b64encode(raw).decode("ascii")}


def _stored_status_ok(path: Path) -> bool:
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    status = stored.get("response", {}).get("status") if isinstance(stored, dict) else None
    return isinstance(status, int) and 200 <= status < 300


def _write_atomically(path: Path, text: str) -> None:
    # Several worker processes may record into one directory: a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".recording-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- replay misses -----------------------------------------------------------------------


def replay_miss(headers: Mapping[str, str], key: str | None = None) -> str | None:
    """The message of a replay that has no recording for the request, if this is one.

    Any host could send the header, so its text is cut to printable ASCII and a bounded
    length, and dropped if it holds the key.
    """
    text = headers.get(REPLAY_MISS_HEADER)
    if not text:
        return None
    text = "".join(c if " " <= c <= "~" else "?" for c in text)[:_MAX_MISS_CHARS].strip()
    if not text or any(form in text for form in _key_forms(key)):
        return "the replay has no recording of this request"
    return text
