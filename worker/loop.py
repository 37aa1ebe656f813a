"""One asyncio event loop per worker process, on a background thread.

Celery tasks are synchronous; the jobs of a chunk run concurrently as coroutines on this loop,
which outlives the task so that one ``httpx.AsyncClient`` (and its connection pool) serves every
task of the process. The loop is made lazily in the process that uses it: a prefork child
never inherits its parent's loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["ProcessLoop", "process_loop"]

T = TypeVar("T")

#: How long a task that is being torn down waits for its coroutines to record their outcomes.
CANCEL_GRACE_S = 10.0


class ProcessLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="decisions-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

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
            return future.result()
        except BaseException:
            # A cancelled concurrent future returns at once; wait for the coroutine itself.
            future.cancel()
            finished.wait(CANCEL_GRACE_S)
            raise

    def stop(self) -> None:
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
