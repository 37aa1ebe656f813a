"""What the runner reports as it goes, for metrics: a seam with a do-nothing default.

The worker installs a Prometheus observer (``worker.observability.metrics``); tests may install
their own.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NullObserver", "Observer"]


class Observer(Protocol):
    def call_started(self, provider: str) -> None: ...

    def call_finished(
        self,
        provider: str,
        status: str,
        latency_s: float,
        cost_usd: float | None,
        cost_basis: str | None,
    ) -> None: ...

    def job_finished(self, kind: str, provider: str, outcome: str, reason: str | None) -> None: ...


class NullObserver:
    def call_started(self, provider: str) -> None:
        pass

    def call_finished(
        self,
        provider: str,
        status: str,
        latency_s: float,
        cost_usd: float | None,
        cost_basis: str | None,
    ) -> None:
        pass

    def job_finished(self, kind: str, provider: str, outcome: str, reason: str | None) -> None:
        pass
