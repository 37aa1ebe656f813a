"""Blocking calls from many coroutines, done by a writer thread a batch at a time.

A worker process has hundreds of jobs in flight, and each ends with blocking calls (ledger
writes, a publish to Redis). One thread hop and one round trip each costs more CPU than the
work itself. A ``Batcher`` has writer threads: a call waits in a queue, a writer takes every
call waiting (up to ``max_batch``), hands them to ``handle`` together, and only then
resolves each call's future. A call never waits for a timer, only for the batch before it;
so what a caller learns (a claim committed, a message appended) is as true as it would be
after the blocking call alone.

With several writers, the first takes every call as it comes and the others help only with
a backlog (``help_at`` calls waiting): two writers each taking what arrived while the other
was committing halved the batches at a hundred jobs a second (1.0 ledger transaction a
single-job job against 0.36 with one writer), while a saturated process needs the second
writer's round trips to overlap the first's.

Subclasses say what one batch is (``handle``): each item's ``result`` or ``error`` is set
there, so one refused item is reported to its own caller and its neighbours go on.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["Batcher", "Item"]


@dataclass(slots=True)
class Item:
    """One call: what to do, the caller's future, and what came of it."""

    method: str
    kwargs: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None
    #: Done already, by a statement covering several items (``GroupCommit``'s fast paths).
    done: bool = False


def _settle(items: list[Item]) -> None:
    for item in items:
        if item.future.done():  # the caller was cancelled meanwhile; the call still happened
            continue
        if item.error is not None:
            item.future.set_exception(item.error)
        else:
            item.future.set_result(item.result)


class Batcher:
    """Queue, writer threads and counters; ``handle`` does one batch."""

    #: Names of the writer threads (``{name}-{i}``).
    thread_name = "batcher"

    def __init__(self, *, max_batch: int, writers: int = 1) -> None:
        self.max_batch = max_batch
        self.writers = writers
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: Calls waiting at which the writers after the first take a batch too.
        self.help_at = max(2, max_batch // 8)
        self._backlog = threading.Event()
        #: Batches done and items they held (the bench and tests read these).
        self.batches = 0
        self.writes = 0

    def handle(self, batch: list[Item]) -> None:
        """Do every item of ``batch``, setting each one's ``result`` or ``error``."""
        raise NotImplementedError

    async def submit(self, method: str, kwargs: dict[str, Any]) -> Any:
        self._start()
        loop = asyncio.get_running_loop()
        item = Item(method, kwargs, loop, loop.create_future())
        self._queue.put(item)
        if self.writers > 1 and self._queue.qsize() >= self.help_at:
            self._backlog.set()
        # A caller cancelled meanwhile cancels only its future: the call itself still
        # happens (it is queued), and its outcome is dropped unread (``_settle``).
        return await item.future

    def close(self) -> None:
        threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        self._backlog.set()  # the helpers take their None too
        for thread in threads:
            thread.join(timeout=10)

    def count(self, items: int) -> None:
        with self._lock:
            self.batches += 1
            self.writes += items

    def _start(self) -> None:
        if self._threads:
            return
        with self._lock:
            if not self._threads:
                threads = [
                    threading.Thread(
                        target=self._run if i == 0 else self._help,
                        name=f"{self.thread_name}-{i}",
                        daemon=True,
                    )
                    for i in range(self.writers)
                ]
                for thread in threads:
                    thread.start()
                self._threads = threads

    def _run(self) -> None:
        """The first writer: every call, as it comes."""
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._take([first])
            if stop:
                self._queue.put(None)  # for this thread, after this batch
            self._do(batch)

    def _help(self) -> None:
        """A writer after the first: a batch only while a backlog waits."""
        while True:
            if self._queue.qsize() < self.help_at:
                self._backlog.wait()
                self._backlog.clear()
            batch, stop = self._take([])
            if batch:
                self._do(batch)
            if stop:
                return

    def _take(self, batch: list[Item]) -> tuple[list[Item], bool]:
        """``batch`` and the calls waiting, up to ``max_batch``; and whether a writer's
        stop (None) was taken."""
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _do(self, batch: list[Item]) -> None:
        try:
            self.handle(batch)
        except BaseException as error:  # a bug: every caller hears of it
            for item in batch:
                item.result, item.error = None, error
        # One wake-up a loop, not one an item: each is a write to the loop's self-pipe.
        by_loop: dict[asyncio.AbstractEventLoop, list[Item]] = {}
        for item in batch:
            by_loop.setdefault(item.loop, []).append(item)
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_settle, items)
