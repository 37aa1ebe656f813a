"""Recording every response a provider receives, so CI can replay them without keys.

The transport hands each response that arrives to its observers
(``worker.providers.observers``); a ``Recorder`` is the one for ``settings.record_dir``
(``DECISIONS_RECORD_DIR``, which ``decisions record`` sets for its command), loaded through
``worker.fakes`` only when that is set.

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
wherever a hostile host echoes it, in any form (``shared.scrub.remove_secrets``: verbatim,
case-folded, URL-quoted, base64 of it or of ``Bearer <key>``, any base64 token that decodes
to text holding it such as ``Basic`` credentials; in headers or body it becomes
``[redacted]``), and so every other provider key set in the environment and every secret
marked with ``shared.scrub.mark_secret``; response headers that carry credentials
(``ALWAYS_SECRET_HEADERS``, the provider's auth header, ``settings.secret_headers``); and
JSON fields the operator names in ``settings.secret_fields`` (dotted paths from the body's
root, ``*`` for any key or item, applied to the recorded request parts and to the response
body).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from shared import scrub
from shared.canonical import digest_of, sha256_hex
from worker.providers.observers import ObservedResponse

__all__ = [
    "ALWAYS_SECRET_HEADERS",
    "RECORDING_FORMAT",
    "REDACTED",
    "WIRE_HEADERS",
    "Recorder",
    "field_digests",
    "recorder_for",
    "recording_path",
    "redact_fields",
    "request_digest",
]

RECORDING_FORMAT: Final = "decisions-recording/1"
REDACTED: Final = scrub.REDACTED
#: Response headers that may carry a credential or a session, whatever the operator says.
ALWAYS_SECRET_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "cookie", "set-cookie",
     "www-authenticate", "proxy-authenticate"}
)
#: Headers describing the bytes on the wire, not the body we keep (it is stored decoded):
#: never recorded, and a recording that holds one is refused by the replay.
WIRE_HEADERS: Final = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)


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


def _secrets(key: str | None) -> tuple[str, ...]:
    """The request's key, every provider key set now, and every marked secret."""
    return tuple({*(k for k in (key,) if k), *scrub.current_secrets()})


def _scrub_text(text: str, forms: tuple[str, ...]) -> str:
    return scrub.remove_secrets(text, forms)


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
        forms = _secrets(observed.key)
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
        dropped = self.secret_headers | WIRE_HEADERS
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
            # Latin-1 maps each byte to one character: the key's (ASCII) forms are found in
            # binary as in text, and the bytes around them come back unchanged.
            raw = _scrub_text(body.decode("latin-1"), forms).encode("latin-1")
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


@lru_cache(maxsize=8)
def recorder_for(directory: str, headers: tuple[str, ...], fields: tuple[str, ...]) -> Recorder:
    """The one recorder of a directory and its secrets (several threads share it)."""
    return Recorder(Path(directory), secret_headers=headers, secret_fields=fields)
