"""The runner's observer and the limiter's meter, writing the families of ``families``."""

from __future__ import annotations

import time

from worker.ledger import SENT_STATUSES
from worker.metrics.families import families
from worker.providers.limiter import Limiter

__all__ = ["MeteredLimiter", "PrometheusObserver", "record_rate_limit_wait", "record_rate_limited"]

#: A slot granted faster than this was not waited for (the await itself costs microseconds).
WAITED_AFTER_S = 0.001


def record_rate_limit_wait(provider: str, waited_s: float) -> None:
    """Count one wait for a rate or concurrency slot of ``provider`` (a limiter calls this)."""
    fam = families()
    fam.rate_limit_waits.labels(provider=provider).inc()
    fam.rate_limit_wait_seconds.labels(provider=provider).inc(max(waited_s, 0.0))


def record_rate_limited(provider: str) -> None:
    """Count one 429 from ``provider`` asking for quiet."""
    families().rate_limited.labels(provider=provider).inc()


class PrometheusObserver:
    """``worker.observe.Observer`` for Prometheus: requests, latency, cost, jobs."""

    def call_started(self, provider: str) -> None:
        families().in_flight.labels(provider=provider).inc()

    def call_finished(
        self,
        provider: str,
        status: str,
        latency_s: float,
        cost_usd: float | None,
        cost_basis: str | None,
    ) -> None:
        fam = families()
        fam.in_flight.labels(provider=provider).dec()
        fam.requests.labels(provider=provider, status=status).inc()
        fam.latency.labels(provider=provider).observe(latency_s)
        if status not in SENT_STATUSES:
            return  # provably never reached the provider: nothing to pay
        if cost_usd is None:
            fam.cost_unknown.labels(provider=provider).inc()
        else:
            fam.cost.labels(provider=provider, basis=cost_basis or "unknown").inc(cost_usd)

    def job_finished(self, kind: str, provider: str, outcome: str, reason: str | None) -> None:
        families().jobs.labels(
            kind=kind, provider=provider, outcome=outcome, reason=reason or ""
        ).inc()


class MeteredLimiter:
    """Wraps a ``Limiter``: times each slot it grants and counts the 429s it is told of."""

    def __init__(self, inner: Limiter) -> None:
        self.inner = inner

    async def acquire(self, provider: str) -> object:
        started = time.monotonic()
        token = await self.inner.acquire(provider)
        waited = time.monotonic() - started
        if waited >= WAITED_AFTER_S:
            record_rate_limit_wait(provider, waited)
        return token

    async def release(self, token: object) -> None:
        await self.inner.release(token)

    async def note_retry_after(self, provider: str, seconds: float) -> None:
        record_rate_limited(provider)
        await self.inner.note_retry_after(provider, seconds)
