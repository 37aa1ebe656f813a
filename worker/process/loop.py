"""One asyncio event loop per worker process, on a background thread.

Celery tasks are synchronous; the jobs of a chunk run concurrently as coroutines on this loop,
which outlives the task so that one ``httpx.AsyncClient`` (and its connection pool) serves every
task of the process. The loop is made lazily in the process that uses it: a prefork child
never inherits its parent's loop.

No job can stop the loop. asyncio re-raises ``SystemExit`` and ``KeyboardInterrupt`` out of
``run_forever`` from whichever task raised them, which ends the loop thread (quietly: a thread
ignores ``SystemExit``) while the worker goes on taking messages. Every task made on this loop
is therefore wrapped (a task factory) so that those become ``ExitContained``, an ordinary
error of that task. If the loop thread ends anyway, it is a vital part that died
(``worker.process.liveness``): the probes fail and the process exits; a task waiting for it does not
wait forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from shared.errors import ExitContained
from worker.process import liveness

__all__ = ["LOOP_THREAD", "ProcessLoop", "contain", "process_loop"]

T = TypeVar("T")

#: How long a task that is being torn down waits for its coroutines to record their outcomes.
CANCEL_GRACE_S = 10.0
#: The loop thread's name, as ``worker.process.liveness`` reports it.
LOOP_THREAD = "decisions-loop"
#: How often a task waiting for the loop looks whether the loop thread is still there.
_ALIVE_CHECK_S = 1.0


async def contain(coro: Coroutine[Any, Any, T]) -> T:
    """``await coro``, with ``SystemExit``/``KeyboardInterrupt`` turned into ``ExitContained``.

    Other ``BaseException``s (``CancelledError`` above all) pass as they are: asyncio keeps
    those inside their task."""
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise ExitContained(exc, "a task on the worker's loop") from exc


def _contained_task(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    *,
    context: contextvars.Context | None = None,
) -> asyncio.Task[Any]:
    return asyncio.Task(contain(coro), loop=loop, context=context)


class ProcessLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_contained_task)  # type: ignore[arg-type]
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=LOOP_THREAD, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        with liveness.vital(LOOP_THREAD, stopping=lambda: self._stopping):
            self.loop.run_forever()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it from the calling (task) thread.

        If the wait is interrupted (a soft time limit, a shutdown), the coroutine is cancelled
        and given a grace period, so that a request in flight is recorded as ``unknown``.
        """
        finished = threading.Event()

        async def tracked() -> T:
            try:
                return await coro
            finally:
                finished.set()

        future: Future[T] = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            return self._result(future)
        except BaseException:
            # A cancelled concurrent future returns at once; wait for the coroutine itself.
            future.cancel()
            if self._thread.is_alive():  # a dead loop finishes nothing
                finished.wait(CANCEL_GRACE_S)
            raise

    def _result(self, future: Future[T]) -> T:
        """The coroutine's result; never a wait for a loop that is gone (that one is fatal,
        ``worker.process.liveness``, and ``fatal`` ends the process from the dying thread)."""
        while True:
            try:
                return future.result(timeout=_ALIVE_CHECK_S)
            except concurrent.futures.TimeoutError:
                if not self._thread.is_alive() and not future.done():
                    liveness.fatal(LOOP_THREAD, "the loop thread is gone; a task waited for it")

    def stop(self) -> None:
        self._stopping = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


_lock = threading.Lock()
_current: tuple[int, ProcessLoop] | None = None


def process_loop() -> ProcessLoop:
    """This process's loop, created on first use (and again in a forked child)."""
    global _current
    with _lock:
        if _current is None or _current[0] != os.getpid():
            _current = (os.getpid(), ProcessLoop())
        return _current[1]
