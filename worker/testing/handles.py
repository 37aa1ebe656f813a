"""The faux server as a test sees it: its URL, its request counts, its failure modes, its
replay misses.

``FauxHandle`` wraps a running ``FauxServer``. ``FauxCounts`` reads what reached it (by body
digest, by call key ``<job id>/<step>``, by job); ``LiveCounts`` gives the same view of what
the providers received from real hosts, so a test that asserts on counts runs live too.
``FauxBehaviourControl`` changes the failure mode for every request or for one job's call.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Protocol

from worker.providers.httpbase import CALL_KEY_HEADER
from worker.providers.observers import ObservedResponse
from worker.testing.faux import FauxBehaviour, FauxProvider, FauxServer
from worker.testing.faux.replay import ReplayMiss
from worker.testing.recording import request_digest

__all__ = [
    "DECIDE_STEP",
    "FauxBehaviourControl",
    "FauxCounts",
    "FauxHandle",
    "LiveCounts",
    "RequestCounts",
    "provider_urls",
]

#: The step of a decide job's one call; its call key is ``<job id>/decide``.
DECIDE_STEP = "decide"


def provider_urls(url: str) -> dict[str, str]:
    """Settings that point every built-in provider at the faux at ``url``.

    Each real host is answered in its own shape, because the faux tells them apart by path
    (OpenRouter's ``/api/v1/systemone``, TypeSafe's ``/v1/systemone``, ``/v1/decisions``).
    """
    return {
        "faux_url": url,
        "openrouter_base_url": f"{url}/api",
        "typesafe_base_url": url,
        "parallel_base_url": url,
        "openai_base_url": url,
    }


class RequestCounts(Protocol):
    """Decision requests counted so far; what ``faux_counts`` gives, faux or live."""

    @property
    def total(self) -> int: ...

    def by_digest(self) -> dict[str, int]: ...

    def by_call(self) -> dict[str, int]: ...

    def for_job(self, job_id: str) -> int: ...

    def __getitem__(self, digest: str) -> int: ...


def _for_job(calls: dict[str, int], job_id: str) -> int:
    prefix = f"{job_id}/"
    return sum(n for key, n in calls.items() if key.startswith(prefix))


class FauxCounts:
    """What reached the faux: requests read, by digest and by call key (dropped ones too)."""

    def __init__(self, provider: FauxProvider) -> None:
        self._provider = provider

    @property
    def total(self) -> int:
        return self._provider.total()

    def by_digest(self) -> dict[str, int]:
        return self._provider.requests()

    def by_call(self) -> dict[str, int]:
        return self._provider.calls()

    def for_job(self, job_id: str) -> int:
        """Requests sent for ``job_id`` (all its steps)."""
        return _for_job(self.by_call(), job_id)

    def __getitem__(self, digest: str) -> int:
        return self._provider.count(digest)

    def reset(self) -> None:
        self._provider.reset()

    def __repr__(self) -> str:
        return f"FauxCounts(total={self.total}, by_call={self.by_call()})"


class LiveCounts:
    """Responses the providers of this process received, counted like ``FauxCounts``.

    Installed as a response observer (``worker.testing.recording.observing``) while a live
    test runs; a request whose connection failed has no response and is not counted.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._digests: Counter[str] = Counter()
        self._calls: Counter[str] = Counter()

    def __call__(self, observed: ObservedResponse) -> None:
        digest = request_digest(observed.request_body)
        headers = {k.lower(): v for k, v in observed.request_headers.items()}
        with self._lock:
            self._digests[digest] += 1
            call = headers.get(CALL_KEY_HEADER.lower())
            if call is not None:
                self._calls[call] += 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._digests.values())

    def by_digest(self) -> dict[str, int]:
        with self._lock:
            return dict(self._digests)

    def by_call(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)

    def for_job(self, job_id: str) -> int:
        return _for_job(self.by_call(), job_id)

    def __getitem__(self, digest: str) -> int:
        with self._lock:
            return self._digests.get(digest, 0)


class FauxBehaviourControl:
    """Set how the faux misbehaves: for every request, or for one job's call."""

    def __init__(self, provider: FauxProvider) -> None:
        self._provider = provider

    @property
    def current(self) -> FauxBehaviour:
        return self._provider.behaviour

    def __call__(self, **changes: Any) -> FauxBehaviour:
        """Change fields of the behaviour (``mode="status", status_code=503``, ...)."""
        return self._provider.update_behaviour(**changes)

    def for_job(self, job_id: str, *, step: str = DECIDE_STEP, **changes: Any) -> None:
        """Give ``job_id``'s call its own behaviour; the other jobs keep theirs."""
        self._provider.override(f"{job_id}/{step}", FauxBehaviour(**changes))

    def reset(self) -> None:
        """Back to answering every request ``ok``."""
        self._provider.set_behaviour(FauxBehaviour())


class FauxHandle:
    """A running faux server: ``url``, ``counts``, ``behaviour``, replay ``misses``."""

    def __init__(self, server: FauxServer) -> None:
        self.server = server
        self.provider = server.provider
        self.counts = FauxCounts(server.provider)
        self.behaviour = FauxBehaviourControl(server.provider)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    def provider_urls(self) -> dict[str, str]:
        return provider_urls(self.url)

    def misses(self) -> list[ReplayMiss]:
        """Requests the replay had no recording for."""
        return self.provider.replay_misses()

    def take_misses(self) -> list[ReplayMiss]:
        """The misses so far, forgotten: a test that expects misses takes them, so the
        fixture does not fail it at teardown."""
        store = self.provider.replay
        return store.take_misses() if store is not None else []
