"""The metrics endpoint through a worker's life, driven by Celery's signals (``worker.app``).

Main process: ``worker_init`` (before the pool forks) prepares the multiprocess directory
and takes the endpoint's port, so that a port another process holds refuses the start (a
worker that logged ``metrics.unavailable`` and then ``worker.ready`` with that port served
nothing, and its probes reached whatever held it); ``worker_ready`` serves the endpoint
and makes ``/readyz`` answer 200; ``worker_shutting_down`` (warm shutdown begins) makes it
answer 503; ``worker_shutdown`` stops it. Pool processes: ``worker_process_init`` closes
their copy of the port, ``worker_process_shutdown`` drops their live gauges.
Everything is a no-op unless ``DECISIONS_METRICS_PORT`` is set.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from functools import lru_cache

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from shared.errors import ConfigurationError
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
    "on_process_init",
    "on_process_shutdown",
    "on_shutdown",
    "on_shutting_down",
    "on_worker_init",
    "on_worker_ready",
]

log = structlog.get_logger("decisions.metrics")

_readiness = Readiness()
#: Bound at ``worker_init``, served from ``worker_ready`` (``_serving``).
_server: MetricsServer | None = None
_serving = False


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


def on_worker_init(settings: Settings, *, required: bool = True) -> None:
    """Prepare the multiprocess directory and take the endpoint's port, before the pool
    forks; it is served from ``on_worker_ready``. A port that cannot be taken is a
    ``ConfigurationError`` when ``required`` (a fleet worker: its probes would reach whatever
    holds the port, or nothing), else said (``metrics.unavailable``) and done without."""
    global _server
    if not enabled(settings) or _server is not None:
        return
    assert settings.metrics_port is not None
    path = prepare_directory()
    # Imported here: it builds on prometheus-client, the optional [metrics] extra.
    from worker.observability.metrics.collector import FleetCollector

    collector = FleetCollector(
        _ledger_of(settings),
        _redis_of(settings),
        interval_s=settings.metrics_fleet_interval_s,
    )
    server = MetricsServer(directory=path, readiness=_readiness, extra=[collector])
    try:
        server.bind(settings.metrics_addr, settings.metrics_port)
    except OSError as exc:
        problem = _unbound(settings.metrics_addr, settings.metrics_port, exc)
        if required:
            remove_directory()  # no worker_shutdown follows a refused start
            raise ConfigurationError(problem) from None
        log.error("metrics.unavailable", port=settings.metrics_port, error=problem)
        return
    _server = server
    log.info("metrics.directory", path=str(path))


def on_worker_ready(settings: Settings) -> None:
    global _serving
    _readiness.ready.set()
    if _server is None or _serving:
        return
    _server.serve()
    _serving = True
    log.info("metrics.serving", addr=settings.metrics_addr, port=settings.metrics_port)


def on_process_init() -> None:
    """In a pool process just forked: close its copy of the endpoint's listening socket, so
    that a pool process outliving its main one does not keep the port from the next worker."""
    global _server
    if _server is not None:
        _server.close()  # the main process's serving thread is not in this one
        _server = None


def _unbound(addr: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"DECISIONS_METRICS_PORT={port}: another process listens on {addr}:{port}: stop "
            "it, or set DECISIONS_METRICS_PORT to a free port (each worker on a host needs "
            "its own)"
        )
    return (
        f"cannot serve metrics on {addr}:{port} (DECISIONS_METRICS_ADDR, "
        f"DECISIONS_METRICS_PORT): {exc.strerror or exc}: set DECISIONS_METRICS_ADDR to an "
        "address of this host (127.0.0.1, 0.0.0.0) and DECISIONS_METRICS_PORT to a port this "
        "user may listen on (from 1024)"
    )


def on_shutting_down() -> None:
    _readiness.stopping.set()


def on_shutdown() -> None:
    global _server, _serving
    if _server is not None:
        _server.stop()
        _server = None
        _serving = False
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
