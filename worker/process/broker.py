"""The worker's Redis broker transport: kombu's, with one failure on a Redis restart mended.

When Redis goes away while the consumer's channel is waiting in ``BRPOP``, Celery collects
the broken connection: kombu closes the channel, which fails on the dead socket before it is
marked closed, then detaches the transport from its connection (``transport.client =
None``). Celery then closes the connection once more; the channel, still open, tries to put
its unacknowledged messages back, needs a Redis client, and reads the host from the detached
``client``: ``AttributeError``, which Celery does not count as a connection error, so it
ends the worker ("Unrecoverable error") instead of reconnecting. Reproduced by
tests/faults/test_loop_pool.py's Redis restart on a loaded machine.

A message taken before the loss and finished after it (the loop pool runs on while the
consumer reconnects) is acknowledged on that closed channel: the same ``AttributeError``.

This channel skips that second restore, and such late acknowledgements, when its
transport is detached: the messages stay in kombu's unacknowledged set in Redis, where the
visibility timeout puts them back (as after a ``kill -9``), and the worker reconnects.
Its delivery also stands a poison envelope for one kombu could not take in
(``worker.process.envelopes.checked_envelope``).

One cost of kombu's is cut (``make bench``'s profile of the open loop: a sixth of the
worker's CPU with single-job messages was redis-py under kombu): kombu builds a new
``redis.Redis`` for every plain command (each delivery's unacked record, each
acknowledgement), 6% of the worker's CPU a job. A channel here keeps one for its pool:
redis-py's clients are safe to share between threads (each command takes a connection from
the pool), and the pool, not the client, is what kombu resets. (Acknowledgements are not
batched: Celery runs each on its consumer's event loop as it comes, and at a hundred jobs a
second the loop rarely has two to write at once.)

A message's size is bounded before anything decodes it. kombu pops an item (``BRPOP`` in
``_brpop_read``, the consumer's; ``RPOP`` in ``_get``, ``basic_get``'s) and in the same line
decodes it to text and parses it, then Celery base64-decodes and parses its body, with no
bound: a 300 MB item took a worker to 2 GB, an OOM kill under a memory limit, and the
message, back from kombu's unacked hash, killed the next worker. kombu has no setting for
this, and rather than copy both methods to put a check between the pop and the decoding,
this channel's Redis clients replace a popped item longer than ``max_message_bytes`` (the
process's settings, ``DECISIONS_MAX_MESSAGE_BYTES``) by a poison envelope's JSON as the
reply is read (a redis-py response callback: ``cap_pops``). kombu decodes and delivers that
small envelope; the guard drops it as ``oversize_message`` (a ``task.poison`` line naming
the size, the cap and the setting, never a byte of the item) and it is acknowledged; the
item itself, popped, is in neither the queue nor the unacked hash. The item is still read
off the socket once (a pop cannot leave it there); the decoding, several times its size, is
what is spared. Producers never build such a message (``shared.message_size``).

Everything else is kombu's own transport; it is subclassed rather than patched, so the
channels of other transports are untouched; ``worker.app`` installs it for ``redis://`` and
``rediss://`` (``install``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from kombu import transport as kombu_transports
from kombu.transport import redis as kombu_redis

from shared.keys import CELERY_QUEUE
from shared.message_size import MAX_MESSAGE_SETTING
from shared.settings import get_settings
from worker.process.envelopes import checked_envelope, poison_envelope

__all__ = ["CAPPED_POPS", "TRANSPORT", "Channel", "Transport", "cap_pops", "install"]

log = logging.getLogger("decisions.broker")

#: The class ``redis://`` and ``rediss://`` name in the worker's process.
TRANSPORT = "worker.process.broker:Transport"
#: kombu's pops of a message, and whether the reply is ``(queue, item)`` (else the item).
CAPPED_POPS: Final = {"BRPOP": True, "RPOP": False}


def install() -> None:
    """``redis://`` and ``rediss://`` brokers use this transport in this process.

    By kombu's alias table rather than Celery's ``broker_transport``: the URL keeps its
    scheme, so kombu's TLS handling of ``rediss://`` and the "Connected to redis://..." line
    operators grep for stay as they are.
    """
    for scheme in ("redis", "rediss"):
        kombu_transports.TRANSPORT_ALIASES[scheme] = TRANSPORT


def cap_pops(client: Any, max_bytes: int) -> Any:
    """``client`` (redis-py), its ``CAPPED_POPS`` replies read with any item longer than
    ``max_bytes`` replaced by a poison envelope's JSON (see the module's docstring)."""
    for command, paired in CAPPED_POPS.items():
        then = client.response_callbacks.get(command)
        client.set_response_callback(command, _capped(then, max_bytes, paired=paired))
    return client


def _capped(then: Callable[..., Any] | None, max_bytes: int, *, paired: bool) -> Callable[..., Any]:
    def read(response: Any, **options: Any) -> Any:
        reply = response if then is None else then(response, **options)
        if paired and isinstance(reply, tuple | list) and len(reply) == 2:
            return reply[0], _within(reply[1], max_bytes)
        return reply if paired else _within(reply, max_bytes)

    return read


def _within(item: Any, max_bytes: int) -> Any:
    if not isinstance(item, bytes | bytearray) or len(item) <= max_bytes:
        return item
    problem = f"a message of {len(item)} bytes; at most {max_bytes} ({MAX_MESSAGE_SETTING})"
    return json.dumps(poison_envelope(problem, "oversize_message")).encode()


class Channel(kombu_redis.Channel):
    #: (the connection pool, the client made for it): see ``conn_or_acquire``.
    _plain: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu's client (the consumer's ``BRPOP`` one too), reading no item over the cap."""
        client = super()._create_client(asynchronous=asynchronous)
        return cap_pops(client, get_settings().max_message_bytes)

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The client given, or this channel's one client for its pool (kombu makes one a
        call)."""
        if client:
            yield client
            return
        pool = self.pool
        made = self._plain
        if made is None or made[0] is not pool:
            made = self._plain = (pool, self._create_client())
        yield made[1]

    def close(self) -> None:
        transport = self.connection
        if not self.closed and transport is not None and transport.client is None:
            # A first close failed on the dead socket and the transport was detached since:
            # no client can be made to restore with (see the module's docstring).
            self.qos.restore_at_shutdown = False
            log.warning(
                "broker.unacked_left: Redis went away during a poll; this channel's "
                "unacknowledged messages return after the visibility timeout"
            )
        super().close()

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        if self._lost():
            # A message taken before the connection was lost and finished after: its ack
            # would need a client of the closed channel (AttributeError, which ends the
            # worker). Left unacknowledged, it comes back after the visibility timeout and
            # the ledger answers it with its stored outcome: nothing is sent again.
            log.warning("broker.ack_after_loss: %s is left for redelivery", delivery_tag)
            return
        super().basic_ack(delivery_tag, multiple=multiple)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if self._lost():
            log.warning("broker.reject_after_loss: %s is left for redelivery", delivery_tag)
            return
        super().basic_reject(delivery_tag, requeue=requeue)

    def _lost(self) -> bool:
        """Closed with its connection, or its transport detached by a collect."""
        transport = self.connection
        return transport is None or transport.client is None


class Transport(kombu_redis.Transport):
    Channel = Channel

    def _deliver(self, message: Any, queue: str) -> None:
        """kombu's delivery, of an envelope it can take in: one pushed by hand onto the task
        queue that it could not (``42``, a list for headers) raised in the consumer's loop
        and stopped the worker; the guard's poison envelope stands for it and is dropped
        with a ``task.poison`` line. On any other queue (the remote-control mailbox) such
        an envelope is only logged and dropped."""
        checked = checked_envelope(message)
        if checked is not message and queue != CELERY_QUEUE:
            log.warning("broker.unreadable_envelope on %s: dropped", queue)
            return
        super()._deliver(checked, queue)
