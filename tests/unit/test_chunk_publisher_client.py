"""The publishing thread keeps one Redis client: a kombu batch of one command per message."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from shared.chunk_publisher import _one_client


class BatchingProducer:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.open = False

    @contextlib.contextmanager
    def batch(self, max_size: int) -> Iterator[None]:
        self.sizes.append(max_size)
        self.open = True
        yield
        self.open = False


def test_a_producer_with_batches_publishes_each_message_at_once_over_one_batch() -> None:
    producer = BatchingProducer()
    with _one_client(producer):
        assert producer.open
    assert producer.sizes == [1] and not producer.open  # flushed per message, one client


def test_a_producer_without_batches_publishes_as_before() -> None:
    producer: Any = object()
    with _one_client(producer) as entered:
        assert entered is None
