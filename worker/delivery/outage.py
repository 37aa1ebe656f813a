"""A ledger outage while a worker holds an answer: keep trying, say so loudly.

A worker whose provider answered holds something paid for. If the ledger cannot be written
(PostgreSQL down, SQLite's disk full) letting the task fail would have its lease run out and
the answer booked ``unknown`` and escalated as "possibly sent". Instead the write is
retried, with backoff, for as long as the claim can still be this delivery's: the write is
conditional (the call still ``claimed``, by this very claim), so a retry can never overwrite
what another delivery settled. Each failure is an error-level ``ledger.unavailable`` line
naming the server, a count in ``decisions_ledger_unavailable_total``, and the
``ledger_outage`` signal (Celery's own kind: ``decisions run`` listens, and stops on an
error no wait mends, a full or read-only SQLite file, as it does for a task's retry).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Final, TypeVar

import structlog
from celery.utils.dispatch import Signal

from worker.ledger import LedgerUnavailable

__all__ = [
    "RECORD_RETRY_FIRST_S",
    "RECORD_RETRY_MAX_S",
    "ledger_outage",
    "report_outage",
    "until_written",
]

log = structlog.get_logger("decisions.delivery")

#: The first pause before a failed write of an answer is tried again; it doubles up to the max.
RECORD_RETRY_FIRST_S: Final = 0.25
RECORD_RETRY_MAX_S: Final = 5.0

T = TypeVar("T")

#: Sent with ``error`` on each failed write held through an outage (on the loop's thread).
ledger_outage: Final = Signal(name="ledger_outage")


def report_outage(server: str, dialect: str, operation: str, error: BaseException) -> None:
    log.error("ledger.unavailable", server=server, operation=operation, error=str(error))
    ledger_outage.send(sender=None, error=error)
    try:
        # Imported here: the metrics package is the worker's, and optional for a library use.
        from worker.observability.metrics.families import families

        families().ledger_unavailable.labels(dialect=dialect).inc()
    except Exception:  # a metrics failure must never cost an answer
        log.debug("metrics.unavailable", exc_info=True)


async def until_written(
    write: Callable[[], Awaitable[T]],
    *,
    operation: str,
    server: str,
    dialect: str,
    now: Callable[[], datetime],
    until: datetime,
    first_s: float | None = None,
) -> T:
    """``write()``, tried again after each ``LedgerUnavailable`` until ``until`` (by ``now``,
    the ledger's clock, which keeps counting through an outage); then the outage is raised."""
    delay = RECORD_RETRY_FIRST_S if first_s is None else first_s
    while True:
        try:
            return await write()
        except LedgerUnavailable as down:
            report_outage(server, dialect, operation, down)
            if now() >= until:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECORD_RETRY_MAX_S)
