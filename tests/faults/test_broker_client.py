"""The worker's broker channel: one Redis client serves a channel's plain commands (kombu
builds a new one for each), and deliveries and acknowledgements still reach Redis through it.

Against a real redis-server of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection

from tests.support.ownservers import OwnRedis, own_redis
from worker.process.broker import Transport

pytestmark = pytest.mark.faults

QUEUE = "decisions-broker-acks-test"


@pytest.fixture
def server() -> Iterator[OwnRedis]:
    with own_redis() as started:
        yield started


def _taken(conn: Connection, n: int) -> list[Any]:
    queue = conn.SimpleQueue(QUEUE)
    for i in range(n):
        queue.put({"job": i})
    return [queue.get(timeout=5) for _ in range(n)]


def _unacked(conn: Connection) -> tuple[int, int]:
    channel = conn.default_channel
    with channel.conn_or_acquire() as client:
        return (
            client.hlen(channel.unacked_key),
            client.zcard(channel.unacked_index_key),
        )


def test_an_ack_is_written_at_once_with_the_one_client(server: OwnRedis) -> None:
    with Connection(server.url(), transport=Transport) as conn:
        (message,) = _taken(conn, 1)
        message.ack()
        assert _unacked(conn) == (0, 0)


def test_a_channel_reuses_one_client_for_its_commands(server: OwnRedis) -> None:
    with Connection(server.url(), transport=Transport) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        given = object()
        with channel.conn_or_acquire(given) as passed:
            assert passed is given
