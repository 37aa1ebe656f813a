"""The per-process resources a worker's tasks share: ledger, providers, chat runtimes and
handlers for menus, reply sink, loop.

Built lazily in the process that uses them (after a prefork fork, never before), or set up
front by the embedded run, which brings its own memory sink.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import redis
from celery import signals

from shared.errors import ConfigurationError
from shared.settings import Settings, get_settings
from worker import metrics
from worker.gc_policy import freeze_long_lived, tune_gc
from worker.handlers import HandlerRegistry, load_handlers
from worker.http_pool import sharded_client
from worker.ledger import Ledger
from worker.ledger.batch import GroupCommit
from worker.loop import ProcessLoop, process_loop
from worker.menus import MenuRunner
from worker.providers import ProviderRegistry
from worker.providers.redis_limiter import RedisLimiter
from worker.reply_batch import GroupPublish
from worker.runner import Runner
from worker.runtimes import RuntimeRegistry
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
    runtimes: RuntimeRegistry | None = None
    handlers: HandlerRegistry | None = None


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
    limiter = metrics.limiter_for(settings, fleet_limits)
    providers = ProviderRegistry.from_settings(settings, http=http, limiter=limiter)
    runtimes = RuntimeRegistry.from_settings(settings, http=http, limiter=limiter)
    handlers = load_handlers(settings.handlers)
    sink: ReplySink = _overrides.get("sink") or RedisPublisher(  # type: ignore[assignment]
        redis.Redis.from_url(settings.redis_url), ttl_s=settings.publish_marker_ttl_s
    )
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=providers,
        sink=sink,
        observer=metrics.observer_for(settings),
    )
    runner.menus = MenuRunner(runner, handlers=handlers, runtimes=runtimes)
    if settings.ledger_group_commit:
        runner.batched.update(GroupCommit(ledger).routes())
    if isinstance(sink, RedisPublisher):
        runner.batched.update(GroupPublish(sink).routes())
    context = WorkerContext(
        settings, ledger, providers, sink, loop, runner, os.getpid(), runtimes, handlers
    )
    freeze_long_lived()
    return context


@signals.worker_init.connect
def _tune_gc(sender: Any = None, **_: Any) -> None:
    # In the worker's main process, before any pool process forks: the frozen start-up
    # objects are shared with the children and never walked (nor copied) by their GC.
    tune_gc(get_settings())


@signals.worker_init.connect
def _load_handlers(sender: Any = None, **_: Any) -> None:
    # At worker start, so that a module in DECISIONS_HANDLERS that does not import stops the
    # worker at once instead of failing its menu jobs later (prefork children inherit them).
    try:
        load_handlers(get_settings().handlers)
    except ConfigurationError as exc:
        # Celery swallows an Exception from a signal handler; SystemExit it does not.
        sys.stderr.write(f"refusing to start: {exc}\n")
        raise SystemExit(2) from None
