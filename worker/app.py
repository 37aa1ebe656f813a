"""The Celery app: ``celery -A worker.app worker`` (or ``decisions worker``).

Its settings follow from the ledger's contract: Celery may deliver a message twice, the ledger
decides whether anything is sent. JSON only (no serializer that runs code on load), late ack,
requeue when a pool process dies, one message reserved per pool slot (the default pool,
``worker.process.pool``, runs messages on the process's asyncio loop), a visibility timeout well
above the longest deadline, and a soft time limit below the hard one, both above the deadline
ceiling.

No settings object goes into Celery's config: remote control (``celery inspect conf``,
``report``) and Flower read that config, and the settings hold the ledger's and the streams'
URLs with their passwords. A worker's settings are its context's (``worker.process.context``); the
one URL Celery must have, the broker's, Celery masks itself wherever it shows it.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import structlog
from celery import Celery, signals

from shared import keys
from shared.celery_producer import broker_ssl
from shared.errors import ConfigurationError
from shared.redis_connect import broker_timeouts
from shared.settings import Settings, get_settings
from worker.observability import metrics
from worker.process import broker, logs
from worker.process.prefetch import PrefetchStep

__all__ = [
    "app", "check_visibility_timeout", "create_app", "pool_settings", "time_limits"
]


def time_limits(settings: Settings) -> tuple[float, float]:
    """(soft, hard) task time limits: a duplicate delivery may wait out a whole lease."""
    # The slack is time a task may take past its jobs' lease (deadline + margin).
    slack = settings.time_limit_slack_s
    soft = settings.deadline_ceiling_s + settings.lease_margin_s + slack
    return soft, soft + slack / 2


def check_visibility_timeout(settings: Settings) -> None:
    """Refuse a visibility timeout that would redeliver a job while it may still be running."""
    _soft, hard = time_limits(settings)
    needed = 2 * hard
    if settings.visibility_timeout_s < needed:
        raise ConfigurationError(
            f"DECISIONS_VISIBILITY_TIMEOUT_S={settings.visibility_timeout_s:g} is not well above "
            f"the deadline ceiling (DECISIONS_DEADLINE_CEILING_S={settings.deadline_ceiling_s:g}, "
            f"task hard limit {hard:g} s): set it to at least {needed:g} s"
        )


def pool_settings(settings: Settings) -> tuple[str, int]:
    """(Celery's ``worker_pool``, ``worker_concurrency``): the loop pool reserves twice as
    many messages as it keeps jobs running per provider (``worker.process.pool``)."""
    if settings.worker_pool == "loop":
        return "worker.process.pool:LoopPool", 2 * settings.max_in_flight
    return settings.worker_pool, settings.worker_concurrency


def create_app(settings: Settings | None = None, **overrides: Any) -> Celery:
    settings = settings or get_settings()
    soft, hard = time_limits(settings)
    pool, concurrency = pool_settings(settings)
    # kombu's Redis transport with a Redis-restart crash mended (worker.process.broker).
    broker.install()
    celery = Celery("decisions", set_as_current=False)
    celery.conf.update(
        broker_url=settings.broker_url,
        broker_use_ssl=broker_ssl(settings.broker_url),
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_pool=pool,
        worker_concurrency=concurrency,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        task_soft_time_limit=soft,
        task_time_limit=hard,
        task_default_queue=keys.CELERY_QUEUE,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": settings.unacked_restore_interval_s,
            "unacked_restore_throttle": settings.unacked_restore_throttle,
            **broker_timeouts(),  # connect and TLS handshake bounded (shared.redis_connect)
        },
        worker_hijack_root_logger=False,
        # Off: three event publishes a message were a tenth of a single-job worker's CPU
        # (bench/README.md). Flower turns them on itself (its ``enable_events``, on by
        # default); ``celery -A worker.app control enable_events`` for other monitors.
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    celery.conf.update(overrides)
    # The loop pool's reserve in jobs, not messages (worker.process.prefetch).
    celery.steps["consumer"].add(PrefetchStep)
    from worker.tasks import register

    register(celery)
    return celery


def _refuse(exc: Exception) -> NoReturn:
    """Stop the worker's start with ``exc`` explained as ``decisions`` explains it."""
    from worker.cli.errors import explain  # only when refusing: it imports a lot

    explanation = explain(exc)
    problem, *fix = explanation.lines() or [type(exc).__name__]
    sys.stderr.write("".join(f"{line}\n" for line in [f"refusing to start: {problem}", *fix]))
    # Celery logs and swallows an Exception from a signal handler; SystemExit it does not.
    raise SystemExit(explanation.exit_code) from None


def _app_of_the_celery_command() -> Celery:
    try:
        return create_app()
    except Exception as exc:
        if "celery.bin.celery" not in sys.modules:
            raise  # imported by code of its own, which sees the error as it is
        # Loaded by `celery -A worker.app ...`, which printed "Unable to load celery
        # application" and the traceback of the settings' error: explained instead.
        _refuse(exc)


app = _app_of_the_celery_command()


@signals.worker_init.connect
def _refuse_bad_visibility(sender: Any = None, **_: Any) -> None:
    try:
        check_visibility_timeout(get_settings())
    except ConfigurationError as exc:
        # Celery logs and swallows an Exception from a signal handler (the worker would start
        # anyway); SystemExit is not one, so `celery -A worker.app worker` refuses too.
        sys.stderr.write(f"refusing to start: {exc}\n")
        raise SystemExit(2) from None


@signals.worker_init.connect
def _refuse_unreachable_broker(sender: Any = None, **_: Any) -> None:
    # Celery would retry an unreachable broker for over an hour, naming no setting: refused
    # at start instead (worker.process.broker_reach), a broker lost later is still retried.
    # This app's workers only: the embedded run's is an in-memory broker of its own.
    if getattr(sender, "app", None) is not app:
        return
    from worker.process.broker_reach import check_broker_reachable

    try:
        check_broker_reachable(app)
    except Exception as exc:
        _refuse(exc)


@signals.celeryd_init.connect
def _refuse_what_fails_every_task(
    sender: Any = None, instance: Any = None, options: Any = None, **_: Any
) -> None:
    # What `decisions worker` checks before it starts Celery, for `celery -A worker.app
    # worker` too (celeryd_init is sent by Celery's worker command only, not by the embedded
    # run's worker), in the same order: the visibility timeout (checked again at worker_init,
    # for every worker), a per-provider setting keyed by no provider, which would not apply,
    # a SQLite ledger file that cannot be written (every message retried for ever), and a
    # ledger behind this code's schema, which ended on Celery's "Unrecoverable error" and its
    # traceback.
    #
    # Only for this app's workers: the signal is every app's, and a process may import this
    # module and run a Celery app of its own (the bench's no-op app does), which needs no
    # ledger and must not be refused for one.
    if instance is not None and getattr(instance, "app", None) is not app:
        return
    from worker.cli.startup import check_ledger_file, check_pool_options, check_registries
    from worker.ledger import Ledger

    settings = get_settings()
    try:
        check_pool_options(options or {}, app.conf.worker_pool)
        check_visibility_timeout(settings)
        check_registries(settings)
        check_ledger_file(settings)
        ledger = Ledger.from_settings(settings)
        try:
            ledger.check_schema()
        finally:
            ledger.dispose()  # made again in the process that runs the tasks
    except Exception as exc:
        _refuse(exc)
    # A fleet worker's retries are said at ERROR (``decisions run`` says its own).
    from worker.process.retries import RetryReporter
    from worker.tasks import RETRIED

    signals.task_retry.connect(RetryReporter(RETRIED), weak=False)


@signals.worker_ready.connect
def _start_reaper(sender: Any = None, **_: Any) -> None:
    interval = get_settings().reaper_interval_s
    if interval > 0:
        from worker.recovery.reaper import ReaperThread

        ReaperThread(interval).start()


@signals.celeryd_init.connect
def _early_logging(options: Any = None, **_: Any) -> None:
    # Before Celery's first warning (running as root, say): every line of a worker is ours.
    settings = get_settings()
    level = (options or {}).get("loglevel") or settings.log_level
    logs.configure_logging(level, settings.log_format)


@signals.setup_logging.connect
def _setup_logging(loglevel: Any = None, **_: Any) -> None:
    # Connected, so Celery leaves logging to us: one renderer for its records and ours.
    if not logs.is_configured():
        settings = get_settings()
        logs.configure_logging(loglevel or settings.log_level, settings.log_format)


@signals.worker_init.connect
def _fleet_init(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    if sender is not None and logs.resolve_format(settings.log_format) == "json":
        sender.quiet = True  # Celery's banner is not one JSON event; worker.ready says it all
    try:
        # A fleet worker without its port would be probed at whatever holds it: refused.
        # The embedded run (`decisions run`) is probed by nobody and goes on without.
        metrics.on_worker_init(settings, required=getattr(sender, "app", None) is app)
    except ConfigurationError as exc:
        sys.stderr.write(f"refusing to start: {exc}\n")
        raise SystemExit(2) from None


@signals.worker_ready.connect
def _fleet_ready(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    controller = getattr(sender, "controller", None)
    if controller is not None and logs.resolve_format(settings.log_format) == "json":
        # Celery prints "worker: Warm shutdown (MainProcess)" raw; worker.stopping says it.
        from celery.apps import worker as celery_worker

        celery_worker.install_worker_term_handler(controller, verbose=False)
        celery_worker.install_worker_term_hard_handler(controller, verbose=False)
    metrics.on_worker_ready(settings)
    structlog.get_logger("decisions.worker").info(
        "worker.ready",
        hostname=getattr(sender, "hostname", None),
        broker=sender.connection.as_uri() if getattr(sender, "connection", None) else None,
        concurrency=getattr(getattr(sender, "pool", None), "limit", None),
        metrics_port=settings.metrics_port,
    )


@signals.worker_shutting_down.connect
def _fleet_stopping(sig: Any = None, how: Any = None, **_: Any) -> None:
    metrics.on_shutting_down()
    structlog.get_logger("decisions.worker").info("worker.stopping", signal=sig, how=how)


@signals.worker_shutting_down.connect
def _bounded_shutdown(**_: Any) -> None:
    # A warm shutdown waits for the tasks running; one that a stuck handler holds would keep it
    # waiting for ever (the threads pool has no time limits): past the hard limit, it ends.
    from worker.process import liveness

    _soft, hard = time_limits(get_settings())
    liveness.exit_after(hard, "the warm shutdown outlasted the task hard time limit")


@signals.worker_shutdown.connect
def _fleet_stopped(**_: Any) -> None:
    metrics.on_shutdown()


@signals.worker_process_init.connect
def _pool_process_start(**_: Any) -> None:
    metrics.on_process_init()


@signals.worker_process_shutdown.connect
def _pool_process_exit(pid: int | None = None, **_: Any) -> None:
    metrics.on_process_shutdown(pid or os.getpid())
