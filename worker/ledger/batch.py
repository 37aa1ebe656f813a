"""Group commit: the ledger writes of many concurrent jobs, one transaction at a time.

A worker process runs hundreds of jobs at once, and each writes the ledger three times (open
the job and claim its call, record the outcome with the terminal message, mark it published).
One transaction each, on a thread pool, costs a transaction's overhead per write and, on
SQLite, a fight for the write lock between the pool's threads. ``GroupCommit`` has one
writer thread: a write waits in a queue, the thread takes every write waiting (up to
``max_batch``), runs them in order in ONE transaction, commits, and only then resolves each
write's future. So a claim is still committed before its caller can send a byte; a write
never waits for a timer, only for the batch before it.

Each write keeps its own outcome. The ledger's state changes raise their refusals
(``JobConflict``, ``ClaimLost``, ``JobNotFound``, ...) before that write changes anything,
so a refused write is reported to its own caller and the batch goes on. A database error
fails the transaction: the batch is rolled back and every write of it is run again alone,
in its own transaction, exactly as ``Ledger``'s methods run it, so one bad write (a claim
whose job row is missing, say) cannot take its neighbours with it. An outage (the database
unreachable) fails them all with ``LedgerUnavailable``, as the single writes would.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import exc
from sqlalchemy.engine import Connection

from shared.errors import LedgerError
from worker.ledger import call_ops, job_ops
from worker.ledger.errors import LedgerUnavailable
from worker.ledger.store import Ledger

__all__ = ["BATCHED_METHODS", "GroupCommit"]

#: Ledger methods whose writes are grouped (the per-job hot path).
BATCHED_METHODS: Final = ("open_job", "open_and_claim", "claim", "finish_job", "mark_published")
_MAX_BATCH: Final = 256
_PG_WRITERS: Final = 2


def _open_job(conn: Connection, now: datetime, kwargs: dict[str, Any]) -> Any:
    return job_ops.open_or_read(conn, now=now, **kwargs)[0]


def _open_and_claim(conn: Connection, now: datetime, kwargs: dict[str, Any]) -> Any:
    return job_ops.open_and_claim(conn, now=now, **kwargs)


def _claim(conn: Connection, now: datetime, kwargs: dict[str, Any]) -> Any:
    return call_ops.claim_call(conn, now=now, **kwargs)


def _finish_job(conn: Connection, now: datetime, kwargs: dict[str, Any]) -> Any:
    # Ledger.finish_job's default: a job finished without a call to record.
    return job_ops.finish_job(conn, now=now, **{"outcome": None, **kwargs})


def _mark_published(conn: Connection, now: datetime, kwargs: dict[str, Any]) -> Any:
    return job_ops.mark_published(conn, now=now, **kwargs)


_OPS: Final[dict[str, Callable[[Connection, datetime, dict[str, Any]], Any]]] = {
    "open_job": _open_job,
    "open_and_claim": _open_and_claim,
    "claim": _claim,
    "finish_job": _finish_job,
    "mark_published": _mark_published,
}


@dataclass(slots=True)
class _Write:
    method: str
    kwargs: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


def _settle(write: _Write) -> None:
    if write.future.done():  # the caller was cancelled meanwhile; the write still happened
        return
    if write.error is not None:
        write.future.set_exception(write.error)
    else:
        write.future.set_result(write.result)


class GroupCommit:
    """Batches ``Ledger`` writes from coroutines; ``await group.claim(...)`` and so on."""

    def __init__(
        self, ledger: Ledger, *, max_batch: int = _MAX_BATCH, writers: int | None = None
    ) -> None:
        self.ledger = ledger
        self.max_batch = max_batch
        # SQLite has one writer at a time anyway; PostgreSQL commits batches side by side, so
        # that its round trips (one a statement) overlap instead of queueing behind one thread.
        self.writers = writers or (1 if ledger.dialect == "sqlite" else _PG_WRITERS)
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: Batches committed and writes they held (the bench reads these).
        self.batches = 0
        self.writes = 0

    # --- the methods, awaitable -----------------------------------------------------------

    async def open_job(self, **kwargs: Any) -> Any:
        return await self._submit("open_job", kwargs)

    async def open_and_claim(self, **kwargs: Any) -> Any:
        return await self._submit("open_and_claim", kwargs)

    async def claim(self, **kwargs: Any) -> Any:
        return await self._submit("claim", kwargs)

    async def finish_job(self, **kwargs: Any) -> Any:
        return await self._submit("finish_job", kwargs)

    async def mark_published(self, **kwargs: Any) -> Any:
        return await self._submit("mark_published", kwargs)

    def routes(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        """The ledger's bound methods mapped to their grouped versions (for ``Runner._db``)."""
        return {getattr(self.ledger, name): getattr(self, name) for name in BATCHED_METHODS}

    def close(self) -> None:
        threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join(timeout=10)

    # --- the writer thread ----------------------------------------------------------------

    async def _submit(self, method: str, kwargs: dict[str, Any]) -> Any:
        self._start()
        loop = asyncio.get_running_loop()
        write = _Write(method, kwargs, loop, loop.create_future())
        self._queue.put(write)
        # Shielded: a cancelled caller must not stop the write from being reported to the
        # ledger's other readers; the caller's own cancel is still raised to it.
        return await asyncio.shield(write.future)

    def _start(self) -> None:
        if self._threads:
            return
        with self._lock:
            if not self._threads:
                threads = [
                    threading.Thread(target=self._run, name=f"ledger-group-commit-{i}", daemon=True)
                    for i in range(self.writers)
                ]
                for thread in threads:
                    thread.start()
                self._threads = threads

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # for this thread, after this batch
                    break
                batch.append(item)
            self._commit(batch)
            for write in batch:
                write.loop.call_soon_threadsafe(_settle, write)

    def _commit(self, batch: list[_Write]) -> None:
        now = self.ledger._now()
        try:
            with self.ledger._tx() as conn:
                for write in batch:
                    try:
                        write.result = _OPS[write.method](conn, now, write.kwargs)
                    except (LedgerError, ValueError) as refused:
                        if _from_database(refused):
                            # The statement failed in the database (PostgreSQL has now
                            # aborted the transaction): no write of this batch may stand.
                            raise _Abort from refused
                        write.error = refused  # refused before it changed anything
        except LedgerUnavailable as down:
            for write in batch:  # an outage fails every write, as it would have alone
                write.result, write.error = None, down
            return
        except (_Abort, LedgerError, exc.SQLAlchemyError):
            self._one_by_one(batch)
            return
        except BaseException as error:  # a bug: every caller hears of it
            for write in batch:
                write.result, write.error = None, error
            return
        self._count(len(batch))

    def _one_by_one(self, batch: list[_Write]) -> None:
        for write in batch:
            write.result, write.error = None, None
            try:
                write.result = getattr(self.ledger, write.method)(**write.kwargs)
            except BaseException as error:
                write.error = error
            else:
                self._count(1)

    def _count(self, writes: int) -> None:
        with self._lock:
            self.batches += 1
            self.writes += writes



class _Abort(Exception):
    """A write's statement failed in the database: run the batch's writes one by one."""


def _from_database(error: BaseException) -> bool:
    cause = error.__cause__ or error.__context__
    return isinstance(cause, exc.SQLAlchemyError)
