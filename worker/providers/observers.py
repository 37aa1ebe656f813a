"""What a provider's transport hands on of each response: the observers' hook.

The transport calls ``observe`` once for each response that arrives, whatever its status,
before it is classified. Observers are the recorder for ``settings.record_dir`` when that is
set (``DECISIONS_RECORD_DIR``, which ``decisions record`` sets for its command; the recorder
itself is the testing part's, ``worker.testing.recording``, loaded through ``worker.fakes``
only then), and any a caller installs with ``observing(fn)`` (the pytest plugin counts live
requests this way). A failing observer is logged and ignored: a paid answer is never lost to
a full disk. While ``recording_paused()`` holds, the settings' recorder writes nothing (the
plugin pauses it for tests that talk to the faux, so a recording run keeps real answers only).

``REPLAY_MISS_HEADER`` is the replay's half of the contract: a replay that has no recording
for a request answers 404 with this header naming the digest and the closest recording, and
the transport surfaces it (``replay_miss``) as the error's message.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

import httpx

from shared import scrub
from shared.settings import get_settings
from worker import fakes

__all__ = [
    "REPLAY_MISS_HEADER",
    "ObservedResponse",
    "ResponseObserver",
    "observe",
    "observing",
    "recording_paused",
    "replay_miss",
]

logger = logging.getLogger(__name__)

REPLAY_MISS_HEADER: Final = "x-decisions-replay-miss"
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
    body: bytes,
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
        response.headers, body, key, auth_header,
    )
    for observer in observers:
        try:
            observer(observed)
        except Exception as exc:
            logger.warning(
                "provider %s: a response observer failed (%s); the call goes on",
                provider, type(exc).__name__,
            )


def _settings_recorder() -> ResponseObserver | None:
    settings = get_settings()
    if settings.record_dir is None:
        return None
    return fakes.recorder(settings)


def replay_miss(headers: Mapping[str, str], key: str | None = None) -> str | None:
    """The message of a replay that has no recording for the request, if this is one.

    Any host could send the header, so its text is cut to printable ASCII and a bounded
    length, and dropped if it holds the key.
    """
    text = headers.get(REPLAY_MISS_HEADER)
    if not text:
        return None
    text = "".join(c if " " <= c <= "~" else "?" for c in text)[:_MAX_MISS_CHARS].strip()
    if not text or (key and scrub.remove_secrets(text, [key]) != text):
        return "the replay has no recording of this request"
    return text
