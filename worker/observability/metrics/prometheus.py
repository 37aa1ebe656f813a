"""The runner's observer and the limiter's meter, writing the families of ``families``.

Every label value passes through ``Labels`` first: one from outside a closed set is
``other``, so no job can add a series or put its text on the endpoint.
"""

from __future__ import annotations

import time

from worker.ledger import SENT_STATUSES
from worker.observability.metrics.families import families
from worker.observability.metrics.labels import Labels
from worker.providers.limiter import Limiter

__all__ = ["MeteredLimiter", "PrometheusObserver", "record_rate_limit_wait", "record_rate_limited"]

#: A slot granted faster than this was not waited for (the await itself costs microseconds).
WAITED_AFTER_S = 0.001


_BUILTIN = Labels()


def record_rate_limit_wait(provider: str, waited_s: float, labels: Labels = _BUILTIN) -> None:
    """Count one wait for a rate or concurrency slot of ``provider`` (a limiter calls this)."""
    fam = families()
    name = labels.provider(provider)
    fam.rate_limit_waits.labels(provider=name).inc()
    fam.rate_limit_wait_seconds.labels(provider=name).inc(max(waited_s, 0.0))


def record_rate_limited(provider: str, labels: Labels = _BUILTIN) -> None:
    """Count one 429 from ``provider`` asking for quiet."""
    families().rate_limited.labels(provider=labels.provider(provider)).inc()


class PrometheusObserver:
    """``worker.observability.observer.Observer`` for Prometheus: requests, latency, cost, jobs."""

    def __init__(self, labels: Labels = _BUILTIN) -> None:
        self.labels = labels

    def call_started(self, provider: str) -> None:
        families().in_flight.labels(provider=self.labels.provider(provider)).inc()

    def call_finished(
        self,
        provider: str,
        status: str,
        latency_s: float,
        cost_usd: float | None,
        cost_basis: str | None,
    ) -> None:
        fam = families()
        name = self.labels.provider(provider)
        fam.in_flight.labels(provider=name).dec()
        fam.requests.labels(provider=name, status=self.labels.status(status)).inc()
        fam.latency.labels(provider=name).observe(latency_s)
        if status not in SENT_STATUSES:
            return  # provably never reached the provider: nothing to pay
        if cost_usd is None:
            fam.cost_unknown.labels(provider=name).inc()
        else:
            basis = self.labels.basis(cost_basis or "unknown")
            fam.cost.labels(provider=name, basis=basis).inc(cost_usd)

    def job_finished(self, kind: str, provider: str, outcome: str, reason: str | None) -> None:
        labels = self.labels
        families().jobs.labels(
            kind=labels.kind(kind),
            provider=labels.provider(provider),
            outcome=labels.outcome(outcome),
            reason=labels.reason(reason),
        ).inc()


class MeteredLimiter:
    """Wraps a ``Limiter``: times each slot it grants and counts the 429s it is told of."""

    def __init__(self, inner: Limiter, labels: Labels = _BUILTIN) -> None:
        self.inner = inner
        self.labels = labels

    async def acquire(self, provider: str) -> object:
        started = time.monotonic()
        token = await self.inner.acquire(provider)
        waited = time.monotonic() - started
        if waited >= WAITED_AFTER_S:
            record_rate_limit_wait(provider, waited, self.labels)
        return token

    async def release(self, token: object) -> None:
        await self.inner.release(token)

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        record_rate_limited(provider, self.labels)
        await self.inner.note_retry_after(provider, seconds)
