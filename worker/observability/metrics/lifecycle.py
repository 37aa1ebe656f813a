"""The metrics endpoint through a worker's life, driven by Celery's signals (``worker.app``).

Main process: ``worker_init`` (before the pool forks) prepares the multiprocess directory;
``worker_ready`` starts the endpoint and makes ``/readyz`` answer 200;
``worker_shutting_down`` (warm shutdown begins) makes it answer 503; ``worker_shutdown``
stops it. Pool processes: ``worker_process_shutdown`` drops their live gauges.
Everything is a no-op unless ``DECISIONS_METRICS_PORT`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from shared.settings import Settings
from worker.ledger import Ledger
from worker.observability.metrics.families import installed
from worker.observability.metrics.labels import Labels
from worker.observability.metrics.multiproc import ENV, prepare_directory, remove_directory
from worker.observability.metrics.prometheus import MeteredLimiter, PrometheusObserver
from worker.observability.metrics.server import MetricsServer, Readiness
from worker.observability.observer import NullObserver, Observer
from worker.providers.limiter import Limiter, NoLimiter

__all__ = [
    "limiter_for",
    "observer_for",
    "on_process_shutdown",
    "on_shutdown",
    "on_shutting_down",
    "on_worker_init",
    "on_worker_ready",
]

log = structlog.get_logger("decisions.metrics")

_readiness = Readiness()
_server: MetricsServer | None = None


#: Said once per process (before a prefork pool forks) when metrics are asked for but the
#: ``[metrics]`` extra is not installed.
MISSING_EXTRA = (
    "DECISIONS_METRICS_PORT is set but prometheus-client is not installed: "
    "pip install 'decision-worker[metrics]'; metrics and probes are off"
)


def enabled(settings: Settings) -> bool:
    """Whether the endpoint is on: asked for (``DECISIONS_METRICS_PORT``) and possible."""
    return settings.metrics_port is not None and _installed_or_said()


@lru_cache(maxsize=1)
def _installed_or_said() -> bool:
    # The pattern of shared.tracing's [otel]: the worker runs on without the extra.
    if installed():
        return True
    log.warning("metrics.unavailable", reason=MISSING_EXTRA)
    return False


def observer_for(settings: Settings) -> Observer:
    """The runner's observer in a worker process: Prometheus when the endpoint is on."""
    return (
        PrometheusObserver(Labels.from_settings(settings)) if enabled(settings) else NullObserver()
    )


def limiter_for(settings: Settings, inner: Limiter | None = None) -> Limiter | None:
    """``inner`` (or no limits) metered when the endpoint is on; ``inner`` as it is if not."""
    if not enabled(settings):
        return inner
    return MeteredLimiter(inner or NoLimiter(), Labels.from_settings(settings))


def on_worker_init(settings: Settings) -> None:
    if enabled(settings):
        path = prepare_directory()
        log.info("metrics.directory", path=str(path))


def on_worker_ready(settings: Settings) -> None:
    global _server
    _readiness.ready.set()
    if not enabled(settings) or _server is not None:
        return
    assert settings.metrics_port is not None
    # Imported here: it builds on prometheus-client, the optional [metrics] extra.
    from worker.observability.metrics.collector import FleetCollector

    directory = Path(os.environ[ENV]) if os.environ.get(ENV) else None
    collector = FleetCollector(
        _ledger_of(settings),
        _redis_of(settings),
        interval_s=settings.metrics_fleet_interval_s,
    )
    server = MetricsServer(directory=directory, readiness=_readiness, extra=[collector])
    try:
        port = server.start(settings.metrics_addr, settings.metrics_port)
    except OSError as exc:
        # The worker still works without its endpoint; the operator must see why it is missing.
        log.error(
            "metrics.unavailable", port=settings.metrics_port, error=f"{type(exc).__name__}: {exc}"
        )
        return
    _server = server
    log.info("metrics.serving", addr=settings.metrics_addr, port=port)


def on_shutting_down() -> None:
    _readiness.stopping.set()


def on_shutdown() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None
    remove_directory()


def on_process_shutdown(pid: int) -> None:
    if os.environ.get(ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def _ledger_of(settings: Settings) -> Callable[[], Ledger]:
    @lru_cache(maxsize=1)
    def ledger() -> Ledger:
        return Ledger.from_settings(settings)

    return ledger


def _redis_of(settings: Settings) -> Callable[[], redis.Redis]:
    @lru_cache(maxsize=1)
    def client() -> redis.Redis:
        # Short timeouts, no retries: a scrape must answer even when Redis does not.
        return redis.Redis.from_url(
            settings.redis_url,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            retry=Retry(NoBackoff(), 0),
        )

    return client
