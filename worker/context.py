"""The per-process resources a worker's tasks share: ledger, providers, reply sink, loop.

Built lazily in the process that uses them (after a prefork fork, never before), or set up
front by the embedded run, which brings its own memory sink.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import redis

from shared.settings import Settings, get_settings
from worker import metrics
from worker.http_pool import sharded_client
from worker.ledger import Ledger
from worker.loop import ProcessLoop, process_loop
from worker.providers import ProviderRegistry
from worker.providers.redis_limiter import RedisLimiter
from worker.runner import Runner
from worker.sinks import RedisPublisher, ReplySink

__all__ = ["WorkerContext", "configure", "current"]

#: Connections kept open per provider host: the chunk's concurrency rides on these.
MAX_CONNECTIONS = 1000


@dataclass
class WorkerContext:
    settings: Settings
    ledger: Ledger
    providers: ProviderRegistry
    sink: ReplySink
    loop: ProcessLoop
    runner: Runner
    pid: int


_lock = threading.Lock()
_context: WorkerContext | None = None
_overrides: dict[str, object] = {}


def configure(*, settings: Settings | None = None, sink: ReplySink | None = None) -> None:
    """Set what the next context is built from (the embedded run and tests use this)."""
    global _context
    with _lock:
        _overrides.clear()
        if settings is not None:
            _overrides["settings"] = settings
        if sink is not None:
            _overrides["sink"] = sink
        _context = None


def current() -> WorkerContext:
    global _context
    with _lock:
        if _context is None or _context.pid != os.getpid():
            _context = _build()
        return _context


def _build() -> WorkerContext:
    settings = _overrides.get("settings") or get_settings()
    assert isinstance(settings, Settings)
    loop = process_loop()
    ledger = Ledger.from_settings(settings)
    ledger.check_schema()
    # Not one httpx pool of MAX_CONNECTIONS: its per-request cost grows with its size
    # (worker.http_pool says why and what was measured).
    http = sharded_client(max_connections=MAX_CONNECTIONS, timeout=settings.provider_timeout_s)
    fleet_limits = RedisLimiter.from_settings(settings) if settings.provider_limits else None
    providers = ProviderRegistry.from_settings(
        settings, http=http, limiter=metrics.limiter_for(settings, fleet_limits)
    )
    sink = _overrides.get("sink")
    if sink is None:
        sink = RedisPublisher(
            redis.Redis.from_url(settings.redis_url), ttl_s=settings.publish_marker_ttl_s
        )
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=providers,
        sink=sink,  # type: ignore[arg-type]
        observer=metrics.observer_for(settings),
    )
    return WorkerContext(settings, ledger, providers, sink, loop, runner, os.getpid())  # type: ignore[arg-type]
