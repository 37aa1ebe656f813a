"""Group publish: the terminal messages of many concurrent jobs, one Redis round trip a batch.

Each job ends with one publish-once call (``shared.streams``). Alone, that is a thread hop
and a round trip per job; here a writer thread takes every publish waiting and sends them
as one pipeline of the same Lua calls, each atomic on its own as it is alone. A caller hears
"appended" (or "published before") only once Redis has answered for its own message, so the
ledger is marked published no earlier than it would be otherwise.
"""

from __future__ import annotations

from typing import Any, Final

from shared.streams import Publication, RedisPublisher
from worker.process.batching import Batcher, Item

__all__ = ["GroupPublish"]

_MAX_BATCH: Final = 256


class GroupPublish(Batcher):
    """Batches ``RedisPublisher.publish`` calls from coroutines: ``await group.publish(...)``."""

    thread_name = "reply-group-publish"

    def __init__(self, publisher: RedisPublisher, *, max_batch: int = _MAX_BATCH) -> None:
        super().__init__(max_batch=max_batch)
        self.publisher = publisher

    async def publish(self, item: Publication) -> Any:
        return await self.submit("publish", {"item": item})

    def handle(self, batch: list[Item]) -> None:
        try:
            answers = self.publisher.publish_many([item.kwargs["item"] for item in batch])
        except Exception as error:  # Redis unreachable: as each publish alone would have
            for item in batch:
                item.error = error
            return
        for item, answer in zip(batch, answers, strict=True):
            if isinstance(answer, Exception):
                item.error = answer
            else:
                item.result = answer
        self.count(len(batch))
