"""A Redis that goes away while the consumer waits in BRPOP does not end the worker.

Celery collects the broken connection (the channel's close fails on the dead socket before
it is marked closed, then the transport is detached), then closes it once more: kombu's
channel then reads the host from the detached transport and raises ``AttributeError``,
which Celery takes for an unrecoverable error. Seen as a worker that ended instead of
reconnecting in tests/faults/test_loop_pool.py's Redis restart; here the state that race
leaves, against a real redis-server that was killed with a message unacknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from kombu import Connection
from kombu.transport import redis as kombu_redis

from tests.support.ownservers import OwnRedis, own_redis
from worker.process.broker import Transport

pytestmark = pytest.mark.faults


@pytest.fixture
def server() -> Iterator[OwnRedis]:
    with own_redis() as started:
        yield started


def _close_twice_after_a_kill(
    server: OwnRedis, transport: type, monkeypatch: pytest.MonkeyPatch
) -> Connection:
    conn = Connection(server.url(), transport=transport)
    queue = conn.SimpleQueue("decisions-broker-test")
    queue.put({"job": 1})
    message = queue.get(timeout=5)  # delivered, not acknowledged: the channel owes it back
    assert message.payload == {"job": 1}
    server.kill()

    # On the worker, the first close failed on the dead socket before the channel was
    # marked closed (a race with the poll, not reproducible on demand): here its clients'
    # close fails the same way, once.
    def dead_socket(self: object) -> None:
        raise redis.ConnectionError("Connection closed by server.")

    with monkeypatch.context() as patch:
        patch.setattr(kombu_redis.Channel, "_close_clients", dead_socket)
        conn.collect(socket_timeout=1)  # what Celery does first when the broker is lost
    conn.close()  # and then Celery closes the collected connection
    return conn


def test_kombus_own_channel_fails_the_second_close(
    server: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure this module mends, pinned: if kombu fixes it, this test says so."""
    with pytest.raises(AttributeError, match="hostname"):
        _close_twice_after_a_kill(server, kombu_redis.Transport, monkeypatch)


def test_the_workers_channel_closes_and_leaves_the_message_for_redelivery(
    server: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    _close_twice_after_a_kill(server, Transport, monkeypatch)
    server.start()  # its append-only file kept the queue, the unacked set and the message
    r = redis.Redis.from_url(server.url())
    assert r.hlen("unacked") == 1, "the unacknowledged message waits for the visibility timeout"
    r.close()


def test_a_message_finished_after_the_loss_is_left_for_redelivery(
    server: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop pool finishes a message taken before the loss and acknowledges it on the
    closed channel (on the worker, kombu's raised AttributeError there and Celery ended the
    worker): this one leaves it for redelivery without a client."""
    conn = Connection(server.url(), transport=Transport)
    queue = conn.SimpleQueue("decisions-broker-test")
    queue.put({"job": 2})
    message = queue.get(timeout=5)
    server.kill()
    conn.collect(socket_timeout=1)
    conn.close()
    message.ack()  # no AttributeError
    server.start()
    r = redis.Redis.from_url(server.url())
    assert r.hlen("unacked") == 1, "left for the visibility timeout to put back"
    r.close()
