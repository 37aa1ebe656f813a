"""``Batcher`` with two writers: the second helps only with a backlog, so calls that come
one at a time make one writer's batches (bigger, fewer transactions) and a burst is shared."""

from __future__ import annotations

import asyncio
import threading
import time

from worker.process.batching import Batcher, Item


class _Recording(Batcher):
    thread_name = "rec"

    def __init__(self, *, pause_s: float = 0.0) -> None:
        super().__init__(max_batch=64, writers=2)
        self.pause_s = pause_s
        self.by_thread: list[tuple[str, int]] = []

    def handle(self, batch: list[Item]) -> None:
        self.by_thread.append((threading.current_thread().name, len(batch)))
        time.sleep(self.pause_s)
        for item in batch:
            item.result = item.kwargs["n"]


def test_calls_one_at_a_time_are_all_the_first_writers() -> None:
    asyncio.run(_one_at_a_time())


async def _one_at_a_time() -> None:
    batcher = _Recording()
    try:
        for n in range(60):
            assert await batcher.submit("x", {"n": n}) == n
    finally:
        batcher.close()
    assert {name for name, _size in batcher.by_thread} == {"rec-0"}


def test_a_backlog_is_shared_with_the_second_writer() -> None:
    asyncio.run(_a_backlog())


async def _a_backlog() -> None:
    batcher = _Recording(pause_s=0.05)
    try:
        first = asyncio.ensure_future(batcher.submit("x", {"n": -1}))
        await asyncio.sleep(0.01)  # the first writer is busy with it
        results = await asyncio.gather(*(batcher.submit("x", {"n": n}) for n in range(200)))
        assert await first == -1
    finally:
        batcher.close()
    assert results == list(range(200))
    names = {name for name, _size in batcher.by_thread}
    assert names == {"rec-0", "rec-1"}
    assert sum(size for _name, size in batcher.by_thread) == 201


def test_close_ends_both_writers() -> None:
    asyncio.run(_close())


async def _close() -> None:
    batcher = _Recording()
    assert await batcher.submit("x", {"n": 1}) == 1
    threads = list(batcher._threads)
    batcher.close()
    assert threads and not any(t.is_alive() for t in threads)
