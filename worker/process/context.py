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

from celery import signals

from shared.errors import ConfigurationError
from shared.intake import IntakeBook, records_intake
from shared.redis_connect import redis_client
from shared.settings import Settings, get_settings
from shared.streams import RedisPublisher, ReplyPublisher
from worker.delivery.reply_batch import GroupPublish
from worker.http.connection_pool import sharded_client
from worker.kinds.dispatch import Runner
from worker.kinds.menus import MenuRunner
from worker.kinds.menus.handlers import HandlerRegistry, load_handlers
from worker.ledger import Ledger
from worker.ledger.batch import GroupCommit
from worker.observability import metrics
from worker.process.durability import check_streams_durable
from worker.process.gc_policy import freeze_long_lived, tune_gc
from worker.process.inflight import LocalLimiter
from worker.process.loop import ProcessLoop, process_loop
from worker.providers import ProviderRegistry
from worker.providers.redis_limiter import RedisLimiter
from worker.runtimes import RuntimeRegistry

__all__ = ["WorkerContext", "configure", "current"]

#: Connections kept open per provider host: the chunk's concurrency rides on these.
MAX_CONNECTIONS = 1000


@dataclass
class WorkerContext:
    settings: Settings
    ledger: Ledger
    providers: ProviderRegistry
    sink: ReplyPublisher
    loop: ProcessLoop
    runner: Runner
    pid: int
    runtimes: RuntimeRegistry | None = None
    handlers: HandlerRegistry | None = None
    #: The producers' intake records, which a task forgets once it ran their jobs
    #: (``worker.recovery.intake``); None unless the broker is Redis.
    intake: IntakeBook | None = None


_lock = threading.Lock()
_context: WorkerContext | None = None
_overrides: dict[str, object] = {}


def configure(*, settings: Settings | None = None, sink: ReplyPublisher | None = None) -> None:
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
    # (worker.http.connection_pool says why and what was measured).
    http = sharded_client(max_connections=MAX_CONNECTIONS, timeout=settings.provider_timeout_s)
    fleet_limits = RedisLimiter.from_settings(settings) if settings.provider_limits else None
    # This process's slots per provider first (worker.process.inflight), then the fleet's, if any.
    limiter = LocalLimiter(settings.max_in_flight, metrics.limiter_for(settings, fleet_limits))
    providers = ProviderRegistry.from_settings(settings, http=http, limiter=limiter)
    runtimes = RuntimeRegistry.from_settings(settings, http=http, limiter=limiter)
    handlers = load_handlers(settings.handlers)
    sink: ReplyPublisher = _overrides.get("sink") or RedisPublisher(  # type: ignore[assignment]
        redis_client(settings.redis_url), ttl_s=settings.publish_marker_ttl_s
    )
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=providers,
        sink=sink,
        observer=metrics.observer_for(settings),
    )
    runner.menus = MenuRunner(runner.delivery, handlers=handlers, runtimes=runtimes)
    if settings.ledger_group_commit:
        runner.use_group_commit(GroupCommit(ledger))
    if isinstance(sink, RedisPublisher):
        runner.use_group_publish(GroupPublish(sink))
    intake = None
    if records_intake(settings.broker_url):
        intake = IntakeBook(redis_client(settings.redis_url))
    context = WorkerContext(
        settings, ledger, providers, sink, loop, runner, os.getpid(), runtimes, handlers, intake
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


@signals.worker_init.connect
def _refuse_volatile_streams(sender: Any = None, **_: Any) -> None:
    # Replies are data: a streams Redis that loses them on a restart is refused up front
    # (worker.process.durability). The embedded run and the test harness bring their own memory
    # sink.
    if "sink" in _overrides:
        return
    settings = _overrides.get("settings") or get_settings()
    assert isinstance(settings, Settings)
    try:
        problem = check_streams_durable(settings)
    except ConfigurationError as exc:
        problem = str(exc)
    if problem:
        sys.stderr.write(f"refusing to start: {problem}\n")
        raise SystemExit(2)
