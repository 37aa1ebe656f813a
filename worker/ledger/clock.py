"""The ledger's clock: the database's time, the one clock leases and deadlines are judged by.

Every worker, reaper and CLI of a fleet compares leases and deadlines with the time of the
one database they share, never with its own wall clock (which may run ahead, behind, or be
set while it runs) nor with a producer's. Reading the database for every comparison would
cost a round trip each, so ``DatabaseClock`` reads it every ``RESYNC_S`` and carries it
forward in between with this process's monotonic clock, which no setting of the wall clock
moves. If the database cannot be read at a resync the clock keeps counting from the last
reading (an outage must not stop a worker that holds an answer from judging its lease);
without any reading yet it raises what the read raised.

SQLite's ``'now'`` is the operating system's time of the machine that runs the process,
which every process sharing the file shares; PostgreSQL's ``clock_timestamp()`` is the
server's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

__all__ = ["RESYNC_S", "DatabaseClock", "database_time"]

#: How long a reading of the database's time is carried forward before the next one.
RESYNC_S: Final = 30.0

_NOW_SQL: Final = {
    "sqlite": text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"),
    "postgresql": text("SELECT clock_timestamp()"),
}


def database_time(conn: Connection) -> datetime:
    """The database server's current time, in UTC."""
    value: Any = conn.execute(_NOW_SQL[conn.dialect.name]).scalar_one()
    if isinstance(value, str):  # SQLite: naive UTC text
        value = datetime.fromisoformat(value)
    moment: datetime = value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class DatabaseClock:
    """``now()`` by the database: read every ``resync_s``, carried by ``time.monotonic``."""

    def __init__(self, read: Callable[[], datetime], *, resync_s: float = RESYNC_S) -> None:
        self._read = read
        self._resync_s = resync_s
        self._lock = threading.Lock()
        self._base: datetime | None = None
        self._at = 0.0  # monotonic time of the reading ``_base``
        self._next = 0.0  # monotonic time of the next attempt to read

    def __call__(self) -> datetime:
        if self._base is None or time.monotonic() >= self._next:
            self._sync()
        assert self._base is not None
        return self._base + timedelta(seconds=time.monotonic() - self._at)

    def _sync(self) -> None:
        with self._lock:
            before = time.monotonic()
            if self._base is not None and before < self._next:
                return  # another thread read it meanwhile
            # Set first: in an outage the next attempt waits a period too, instead of every
            # caller waiting for the database's connect timeout in turn.
            self._next = before + self._resync_s
            try:
                read = self._read()
            except Exception:
                if self._base is None:
                    raise
                return  # keep counting from the last reading
            after = time.monotonic()
            # The reading was taken somewhere in the round trip: its middle is the best guess.
            self._base, self._at = read, (before + after) / 2
