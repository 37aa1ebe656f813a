"""The loop pool's reserve counted in jobs (and bytes), not in messages.

Celery reserves messages: the loop pool asks for ``2 x DECISIONS_MAX_IN_FLIGHT`` of them
(``worker.app.pool_settings``), so that single-job messages keep every slot of the job gate
busy. But a message may hold 32 jobs, or a thousand: measured, a default worker with a slow
provider took 200 messages of 32 jobs of 50 KB each (320 MB of jobs, 256 of them in flight)
and grew to 1.6 GB; under a container's memory limit that is an OOM kill, the messages go
back to the queue, and the next worker takes them and dies too.

So a message takes as many prefetch slots as it holds jobs, or as its body holds
``BYTES_PER_SLOT`` (a few big jobs weigh as many small ones): taking one, the pool lowers
Celery's prefetch count by its cost less one (the one slot Celery counts itself), and
raises it back when the message is acknowledged or handed back. Celery's QoS object is
made for this (``increment_eventually``/``decrement_eventually``, applied by the consumer's
loop: Celery does the same for messages with an ``eta``); the amounts are kept here, under
a lock, so that what is raised is exactly what was lowered, on the QoS it was lowered on (a
reconnect gives Celery a new QoS at its full count while old messages still run: theirs
are not raised again). Not capped at the configured count: Celery raises it meanwhile for
each retry waiting for its ``eta`` and lowers it after, and a cap would keep what it took.

The consumer bootstep ``PrefetchStep`` hands the pool the consumer's QoS each time Celery
makes one (at start and after each reconnect).
"""

from __future__ import annotations

import threading
from typing import Any, Final

from celery import bootsteps

__all__ = ["BYTES_PER_SLOT", "JobPrefetch", "PrefetchStep", "message_cost"]

#: A message's body bytes that weigh as much as one job (the default 512 slots: 64 MiB of
#: message bodies reserved, a few times that once decoded).
BYTES_PER_SLOT: Final = 128 * 1024


def message_cost(jobs: int, body_bytes: int) -> int:
    """The prefetch slots a message of ``jobs`` jobs and ``body_bytes`` bytes takes (≥ 1)."""
    return max(1, jobs, -(-body_bytes // BYTES_PER_SLOT))


class JobPrefetch:
    """What the pool took out of Celery's prefetch count, message by message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._qos: Any = None

    def attach(self, qos: Any) -> None:
        """Celery's QoS (``consumer.qos``), anew after each reconnect."""
        with self._lock:
            self._qos = qos

    def take(self, cost: int) -> tuple[Any, int]:
        """Lower the prefetch count for a message of ``cost`` slots; (the QoS, how much it
        was lowered), for ``give``. Never below one: the consumer must still take the next
        message once this one is done."""
        with self._lock:
            qos = self._qos
            if qos is None or not qos.value or cost <= 1:
                return qos, 0
            taken = min(cost - 1, qos.value - 1)
            if taken > 0:
                qos.decrement_eventually(taken)
            return qos, max(taken, 0)

    def give(self, qos: Any, taken: int) -> None:
        """Raise the prefetch count back by what ``take`` lowered it, on the QoS it lowered."""
        if taken <= 0:
            return
        with self._lock:
            if qos is not self._qos or not qos.value:
                return  # a reconnect made a new QoS, at its full count already
            qos.increment_eventually(taken)


class PrefetchStep(bootsteps.StartStopStep):
    """Hands the consumer's QoS to a pool that counts its reserve in jobs (``prefetch``)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        prefetch = getattr(c.pool, "prefetch", None)
        if isinstance(prefetch, JobPrefetch) and c.qos is not None:
            prefetch.attach(c.qos)
