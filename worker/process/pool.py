"""``LoopPool``: a Celery pool that runs each message's jobs straight on the process's loop.

``decisions worker`` uses it unless ``DECISIONS_WORKER_POOL`` names a Celery pool. One
process keeps ``DECISIONS_MAX_IN_FLIGHT`` requests in flight per provider
(``worker.process.inflight``) whether jobs come one a message or a thousand a message;
Celery still does everything else (the Redis transport, prefetch, events, remote control,
the ``Request`` that acknowledges).

Why this mechanism (measured with ``make bench``'s open-loop scenario and A/B runs of
single-job messages at faux latency 1 s, one worker process on a 2-core machine shared with
other work; figures in ``bench/HISTORY.md``):

- **A thread pool sized from the limit** (``--pool threads --concurrency 200``) gave the
  same rate and CPU per decision as this pool in those runs (27 to 29/s at 19 to 20 ms CPU a
  decision: both CPU-bound, not bound by the pool). It was not chosen because there in
  flight is threads times chunk size, not a setting: a message holds its thread for its
  slowest job (four 10,000-item sifts held four threads and made small jobs wait), a
  thousand-job message takes a thread and a thousand requests at once, and a warm shutdown
  must wait for every job of every message taken.
- **Worker-side batching** (celery-batches) gathers messages for a flush interval or count,
  which adds that interval to every job's latency at low rates, needs prefetch unbounded or
  as large as a batch, replaces the task's strategy (the poison guard, ``worker.process.guard``,
  lives there), and a batch holds its thread until its slowest job is done. Not built.
- **This pool**: the consumer hands a message to ``on_apply`` (its main thread, after the
  guard); the message's jobs are decoded and run as one coroutine on the process loop, with
  no thread of their own and no Celery tracer. A job waits for a slot of its provider before
  it opens (``JobGate``) and each request for a request slot (``LocalLimiter``), so in
  flight is a setting, not a pool size, and big messages share the slots with small ones.
  What bounds it is CPU per decision: with one job a message, Celery's delivery and
  acknowledgement make a decision cost about three times a chunked one.

A message whose jobs all wait for one provider, whose slots and waiting share are full, is
handed back to the queue (``worker.process.deferral``) while other providers are served.

What is kept exactly: **late acknowledgement** (a message is acknowledged by Celery's own
``Request.on_success``, called only once every job of it has its terminal message published
and its intake record forgotten, as the task does); **at-most-once** (the ledger decides what
is sent, as for every pool); **no loss**: a message is acknowledged after its jobs, never
before, so a ``kill -9`` leaves it unacknowledged for the transport to deliver again. A
message whose chunk failed (a ledger outage, the soft time limit, a bug) is handed to the
classic path on a thread of its own: Celery's tracer runs the task again, which replays what
finished from the ledger and retries with back-off exactly as before. A warm shutdown admits
no more jobs, waits for those started, and leaves a message with jobs never started
unacknowledged (the transport puts it back when the connection closes); a cold one cuts the
requests in flight off, and their calls are booked ``unknown`` by the next delivery.

The acknowledgement, Celery's events (when a monitor turns them on) and the intake's forget
are blocking Redis calls: one thread (``worker.process.acks``) does them in order, so the
loop never waits on them.

Cost per single-job decision (``make bench`` open loop, 100/s offered, PostgreSQL, the same
loaded 2-core machine, A/B against the code before, figures in ``bench/HISTORY.md``): 13.7
to 15.6 ms of worker CPU fell to 9.4 to 12.6 ms, ``direct`` 2.5 to 2.9 ms. Cut: Celery's task
events off by default (three publishes a message, a tenth of the CPU; Flower turns them on
itself); a job's published mark rides on the group commit's next transaction (two awaited
writes a job, not three: 1.41 ledger transactions a job became 1.01 at saturation, 0.36
with one PostgreSQL writer); the publish-once script called by its SHA (no ``SCRIPT
EXISTS`` round trip a batch: 22.8 Redis calls a job, all clients, became 20.5). Not taken
(``python -m bench.http_stacks``, ``bench/HISTORY.md``): uvloop (no gain), httpx-aiohttp's
transport (2% of a single-job decision; it drops the ``worker.http.connection_pool`` layer
the "possibly sent" detection stands on), httpx2 (about 2% of a chunked decision). What
is left is flat (README "Fleet sizing" gives the py-spy shares of today's run): ledger, HTTP client,
Celery and kombu, reply streams, runner, pydantic, thread hand-offs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import structlog
from billiard.einfo import ExceptionInfo
from celery.concurrency.base import BasePool, apply_target
from celery.exceptions import Reject
from celery.worker import state as worker_state
from kombu.serialization import loads, prepare_accept_content

from shared import keys
from shared.errors import NotAdmitted
from worker.observability import tracing
from worker.process import context
from worker.process.acks import AckThread
from worker.process.deferral import Deferrals
from worker.process.faults import fault_point
from worker.process.inflight import JobGate, job_provider
from worker.process.prefetch import JobPrefetch, message_cost
from worker.recovery.intake import forget_ran

__all__ = ["CELERY_STRATEGY_LOGGER", "LoopPool", "message_jobs"]

log = structlog.get_logger("decisions.pool")

#: Celery's logger of a message received (``celery.worker.strategy``).
CELERY_STRATEGY_LOGGER = "celery.worker.strategy"
#: How long after Celery cancels a request the pool looks whether it is a cold shutdown.
TERMINATE_LOOK_S = 0.05
#: How long a warm shutdown waits for the messages started (past it, the task hard time
#: limit's exit, ``worker.app``, ends the process anyway).
STOP_WAIT_S = 24 * 3600.0


def message_jobs(args: Any, kwargs: Any) -> list[Any] | None:
    """The jobs of a ``run_jobs`` message's arguments, or None if they are not that shape."""
    if isinstance(kwargs, dict) and set(kwargs) == {"jobs"} and not args:
        jobs = kwargs["jobs"]
    elif isinstance(args, list | tuple) and len(args) == 1 and not kwargs:
        jobs = args[0]
    else:
        return None
    return jobs if isinstance(jobs, list) else [jobs]


class LoopPool(BasePool):
    """Messages as coroutines on the process loop; ``limit`` messages reserved at once."""

    body_can_be_buffer = False
    signal_safe = False
    is_green = False
    task_join_will_block = False

    def on_start(self) -> None:
        # In the worker's main process, before the first message: a ledger or provider
        # setting that cannot work fails here, not on every message.
        self._ctx = context.current()
        # Celery logs "Task ... received" at INFO for every message (decided as the consumer
        # builds its strategies, after the pool starts). Here a job's own events say more,
        # with its job id (call.finished, job.replayed, job.rejected...); the line doubled a
        # single-job worker's log and was 2.3% of its CPU (py-spy, make bench's open loop).
        # At DEBUG it stays.
        strategy_log = logging.getLogger(CELERY_STRATEGY_LOGGER)
        if not strategy_log.isEnabledFor(logging.DEBUG):
            strategy_log.setLevel(logging.WARNING)
        if self._ctx.runner.gate is None:
            self._ctx.runner.gate = JobGate(
                self._ctx.settings.max_in_flight, self._ctx.settings.default_provider
            )
        # A slow provider's backlog is handed back, not kept (``worker.process.deferral``).
        self.deferrals = Deferrals(self._ctx.settings.max_in_flight)
        accept = self.app.conf.accept_content if self.app is not None else ["json"]
        self._accept = prepare_accept_content(accept)
        self._acks = AckThread(lambda jobs: forget_ran(self._ctx.intake, jobs))
        # Given Celery's QoS by the consumer's ``PrefetchStep`` once it has one.
        self.prefetch = JobPrefetch()
        self._lock = threading.Lock()
        self._running: set[Future[Any]] = set()
        self._classic: set[threading.Thread] = set()
        self._idle = threading.Condition(self._lock)
        self._stopping = False
        self._terminated = False

    # --- a message ---------------------------------------------------------------------------

    def on_apply(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callable[..., Any] | None = None,
        accept_callback: Callable[..., Any] | None = None,
        soft_timeout: float | None = None,
        error_callback: Callable[..., Any] | None = None,
        **_: Any,
    ) -> None:
        args = args or ()
        jobs = self._jobs_of(args)
        if jobs is None:  # not ours, or not a shape this path knows: Celery's own way
            self._start_classic(target, args, kwargs, callback, accept_callback)
            return
        default = self._ctx.settings.default_provider
        providers = [job_provider(raw, default) for raw in jobs]
        may_hand_back = error_callback is not None and not self._stopping
        if not self.deferrals.admit(providers, may_hand_back=may_hand_back):
            assert error_callback is not None
            self._hand_back(error_callback)
            return
        if accept_callback is not None:
            # Celery's Request.on_accepted sends an event: on the acks thread, in order
            # before the message's acknowledgement, not on the consumer's thread, which
            # takes in every message.
            accepted_at = time.monotonic()
            self._acks.put(lambda: accept_callback(os.getpid(), accepted_at))
        request = args[2] if len(args) > 2 and isinstance(args[2], dict) else {}
        # The reserve counts jobs, not messages (``worker.process.prefetch``).
        body = args[3]
        held = self.prefetch.take(
            message_cost(len(jobs), len(body) if isinstance(body, bytes | str) else 0)
        )
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(
            self._run(jobs, request, soft_timeout), self._ctx.loop.loop
        )
        with self._lock:
            self._running.add(future)

        def done(f: Future[Any]) -> None:
            ran = jobs if not f.cancelled() and f.exception() is None else None
            self._acks.put(
                lambda: self._finish(f, jobs, started, target, args, kwargs, callback, held),
                ran,
            )
            self.deferrals.done(providers)

        future.add_done_callback(done)

    def _hand_back(self, error_callback: Callable[..., Any]) -> None:
        """Celery's ``Request.on_failure`` with ``Reject(requeue=True)``, on the acks thread:
        the message goes to the back of the queue, nothing of it started."""
        try:
            raise Reject("its provider's slots and waiting share are full", requeue=True)
        except Reject:
            failure = ExceptionInfo()
        self._acks.put(lambda: error_callback(failure))

    def _jobs_of(self, args: tuple[Any, ...]) -> list[Any] | None:
        if len(args) != 6 or args[0] != keys.RUN_JOBS_TASK:
            return None
        _name, _id, _request, body, content_type, content_encoding = args
        try:
            if content_type:
                payload = loads(body, content_type, content_encoding, accept=self._accept)
            else:
                payload = body
            task_args, task_kwargs, _embed = payload
        except Exception:  # the tracer decodes it again, and reports what is wrong
            return None
        return message_jobs(task_args, task_kwargs)

    async def _run(self, jobs: list[Any], request: dict[str, Any], soft: float | None) -> Any:
        with tracing.continued(request), tracing.span(
            tracing.TASK_SPAN, kind="consumer", **{"messaging.system": "celery"}
        ):
            async with asyncio.timeout(soft):
                return await self._ctx.runner.run_chunk(jobs)

    def _finish(
        self,
        future: Future[Any],
        jobs: list[Any],
        started: float,
        target: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        callback: Callable[..., Any] | None,
        held: tuple[Any, int],
    ) -> None:
        """On the acks thread: acknowledge a message whose jobs all ran, or hand it on; then
        give its prefetch slots back."""
        try:
            error = future.exception()
            if error is None:
                # Their intake records are forgotten already (``AckThread``): what the task's
                # ``after_run`` does, for a batch of messages at once.
                for raw in jobs:
                    if isinstance(raw, dict):
                        fault_point("after_publish", str(raw.get("id")))
                if callback is not None:
                    # Celery's Request.on_success: task_ready, the late ack, the event.
                    callback((0, repr(future.result()), time.monotonic() - started))
            elif isinstance(error, NotAdmitted) or self._stopping:
                # Stopping: jobs never started. Unacknowledged, the message goes back to
                # the broker when the connection closes; the jobs that did run replay.
                log.info("pool.left_to_broker", jobs=len(jobs))
            else:
                log.info("pool.classic_path", jobs=len(jobs), error=type(error).__name__)
                self._start_classic(target, args, kwargs, callback, None)
        finally:
            self.prefetch.give(*held)
            with self._lock:
                self._running.discard(future)
                self._idle.notify_all()

    def _start_classic(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        callback: Callable[..., Any] | None,
        accept_callback: Callable[..., Any] | None,
    ) -> None:
        """Celery's tracer on a thread of its own (the task blocks on the loop there)."""

        def run() -> None:
            try:
                apply_target(target, args, kwargs, callback, accept_callback)
            finally:
                with self._lock:
                    self._classic.discard(threading.current_thread())
                    self._idle.notify_all()

        thread = threading.Thread(target=run, name="decisions-classic", daemon=True)
        with self._lock:
            self._classic.add(thread)
        thread.start()

    # --- stopping ----------------------------------------------------------------------------

    def on_stop(self) -> None:
        """Warm shutdown: admit no more jobs, wait for the messages started, then their acks.

        A cold shutdown stops the pool from its signal handler: that is ``on_terminate`` at
        once. A wait there held the handler, and any lock the main thread held (a CI hang)."""
        if worker_state.should_terminate is not None:
            self.on_terminate()
            return
        self._stopping = True
        gate = self._ctx.runner.gate
        if gate is not None:
            self._ctx.loop.loop.call_soon_threadsafe(gate.close)
        with self._lock:
            self._idle.wait_for(
                lambda: self._terminated or (not self._running and not self._classic),
                STOP_WAIT_S,
            )
            if self._terminated:  # a cold shutdown came during the wait: nothing more
                return
        self._acks.close(STOP_WAIT_S)
        self._ctx.runner.flush_published()  # the marks still waiting for a batch to ride on

    def on_terminate(self) -> None:
        """Cold shutdown: the loop stops where it is, as a killed pool process would; the
        calls in flight stay claimed for the next delivery to book ``unknown`` (left running,
        the loop finished them while Celery exited: no cold shutdown), their messages
        unacknowledged. A warm shutdown waiting for them stops waiting."""
        self._stopping = True
        with self._lock:
            self._terminated = True
            self._idle.notify_all()
        if self._ctx.loop.alive():
            self._ctx.loop.stop()

    def terminate_job(self, pid: int, signal: int | None = None) -> None:
        """Celery's cold shutdown terminates each running request this way; the loop pool's
        requests share one loop, so that is the loop stopping (``on_terminate``). Outside a
        cold shutdown (a broker connection lost, ``celery control revoke --terminate``) one
        message is not cut out of the loop: it runs on, and the ledger keeps it at most
        once."""
        # Celery cancels every running request, then marks the cold shutdown: look a moment
        # later. A cancel after a broker connection loss is not followed by one: those run
        # on (their acknowledgement may be lost; a redelivery replays them from the ledger).
        timer = threading.Timer(TERMINATE_LOOK_S, self._terminate_if_cold, args=(pid,))
        timer.daemon = True
        timer.start()

    def _terminate_if_cold(self, pid: int) -> None:
        if worker_state.should_terminate is not None:
            self.on_terminate()
        elif not self._stopping:
            log.warning("pool.cancel_ignored", pid=pid, why="not a cold shutdown")

    def grow(self, n: int = 1) -> None:
        """``celery control pool_grow`` (and ``pool_shrink``): answered, not done."""
        raise NotImplementedError(
            "the loop pool has no processes to grow or shrink: DECISIONS_MAX_IN_FLIGHT "
            f"(now {self._ctx.settings.max_in_flight}) bounds its requests in flight; "
            "restart the worker with another value"
        )

    shrink = grow

    def _get_info(self) -> dict[str, Any]:
        info = super()._get_info()
        gate = self._ctx.runner.gate
        with self._lock:
            messages = len(self._running)
        info.update(
            {
                "max-concurrency": self.limit,
                "messages-running": messages,
                "max-in-flight": gate.limit if gate is not None else None,
                "messages-handed-back": self.deferrals.handed_back,
            }
        )
        return info

    @property
    def num_processes(self) -> int:
        """The messages it reserves, as a pool of that many processes would: Celery sizes
        its prefetch count from this anew on every reconnect (``max_prefetch_count``). It
        was 1 (one process): after any broker restart the worker took one message at a
        time, one single job in flight instead of ``DECISIONS_MAX_IN_FLIGHT``."""
        return int(self.limit)
