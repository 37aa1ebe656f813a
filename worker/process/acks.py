"""The loop pool's acknowledgement thread: blocking Redis calls, in order, off the loop.

A message's acknowledgement, Celery's events (when a monitor turns them on) and the intake's
forget are blocking Redis calls. ``worker.process.pool.LoopPool`` runs its messages on the
process's asyncio loop, which must never wait on them: one thread does them, in the order
they were put, so that a message is never acknowledged before the callbacks put ahead of it.
A plain ``queue.SimpleQueue`` and one thread: an executor would run them out of order.

Nothing a message holds may end the thread (a job's ``reply_to`` of 5 raised out of the
intake's forget, found by an attack: the thread ended, nothing was acknowledged again, and
the worker, its reserve full, took nothing more while it looked healthy). What is put is run
under ``except Exception``; and the thread is vital (``worker.process.liveness``): should it
end all the same, the process exits for its supervisor to replace, its messages
unacknowledged for the broker to deliver again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog

from worker.process import liveness

__all__ = ["ACK_THREAD", "AckThread"]

log = structlog.get_logger("decisions.pool")

#: The thread that acknowledges messages (and sends Celery's events) for the loop.
ACK_THREAD = "decisions-acks"


class AckThread:
    """One daemon thread running callbacks in order (a daemon: a cold shutdown is not held).

    A callback may name jobs that ran (``put(fn, ran=jobs)``): the intake records of every
    such callback waiting are forgotten in one Redis call before any of them runs (one
    round trip for many messages, where the task makes one a message)."""

    #: Callbacks taken at once, at most.
    BATCH = 256

    def __init__(self, forget: Callable[[list[Any]], None]) -> None:
        self._forget = forget
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], list[Any] | None] | None] = (
            queue.SimpleQueue()
        )
        self._closing = False
        self._thread = threading.Thread(target=self._vital_run, name=ACK_THREAD, daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], None], ran: list[Any] | None = None) -> None:
        self._queue.put((fn, ran))

    def _vital_run(self) -> None:
        with liveness.vital(ACK_THREAD, stopping=lambda: self._closing):
            self._run()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self.BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            ran = [job for _fn, jobs in batch if jobs for job in jobs]
            if ran:
                try:
                    self._forget(ran)  # best effort (worker.recovery.intake)
                except Exception:  # a bug of it must not stop every later acknowledgement
                    log.exception("pool.forget_failed", jobs=len(ran))
            for fn, _jobs in batch:
                try:
                    fn()
                except Exception:  # a callback's bug must not stop every later acknowledgement
                    log.exception("pool.callback_failed")
            if stop:
                return

    def close(self, timeout_s: float) -> None:
        self._closing = True
        self._queue.put(None)
        self._thread.join(timeout_s)
