"""Pipelined publishing: chunks go out in order on one thread; an error stops it and reaches
the caller; nothing queued after the error is sent."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from celery import Celery

from shared.chunk_publisher import ChunkPublisher


def app() -> Celery:
    return Celery("t", broker="memory://", set_as_current=False)


def test_chunks_are_sent_in_order_over_one_producer_and_reported() -> None:
    sent: list[tuple[int, int]] = []
    producers: set[int] = set()
    threads: set[str] = set()
    progress: list[int] = []

    def send(producer: Any, chunk: list[dict[str, Any]]) -> None:
        producers.add(id(producer))
        threads.add(threading.current_thread().name)
        sent.append((chunk[0]["n"], len(chunk)))

    with ChunkPublisher(app(), send, on_sent=progress.append) as publisher:
        for n in range(0, 100, 10):
            publisher.put([{"n": n + i} for i in range(10 if n < 90 else 3)])
    assert sent == [(n, 10) for n in range(0, 90, 10)] + [(90, 3)]
    assert progress == [10] * 9 + [3]
    assert len(producers) == 1 and threads == {"chunk-publisher"}
    assert publisher.sent == 10


def test_a_failed_publish_reaches_the_caller_and_stops_the_rest() -> None:
    sent: list[int] = []

    def send(producer: Any, chunk: list[dict[str, Any]]) -> None:
        if chunk[0]["n"] == 2:
            raise ConnectionError("broker went away")
        sent.append(chunk[0]["n"])

    with pytest.raises(ConnectionError), ChunkPublisher(app(), send, depth=2) as publisher:
        for n in range(50):
            publisher.put([{"n": n}])
    assert sent == [0, 1]  # nothing after the failed chunk went out
