"""Group commit: the ledger writes of many concurrent jobs, one transaction at a time.

A worker process runs hundreds of jobs at once, and each writes the ledger three times (open
the job and claim its call, record the outcome with the terminal message, mark it published).
One transaction each, on a thread pool, costs a transaction's overhead per write and, on
SQLite, a fight for the write lock between the pool's threads. The first two are awaited
(the claim is committed before a byte is sent, the terminal message before it is
published); the mark is not (``mark_published_later``): it rides on the next batch's
transaction if one comes within ``MARK_WINDOW_S``, so a job alone costs two transactions,
not three, once jobs come more than 20 a second. ``GroupCommit`` has one
writer thread (on PostgreSQL a second one, which helps with a backlog only;
``worker.process.batching``): a write waits in a queue, the
thread takes every write waiting (up to ``max_batch``), runs them in ONE transaction,
commits, and only then resolves each write's future. So a claim is still committed before
its caller can send a byte; a write never waits for a timer, only for the batch before it.

Within the transaction the batch's common writes go first as multi-row statements: new
jobs opened and claimed (two INSERTs for all of them), jobs finished (a locking SELECT and
two executemany UPDATEs), published marks (one UPDATE); then every other write, in order.
The writes of a batch are all pending at once, so any order of them is an order they could
have arrived in. A write such a statement cannot settle alone (a job already there, named
twice in the batch, not found) is left to its own run, which says why.

Each write keeps its own outcome. The ledger's state changes raise their refusals
(``JobConflict``, ``ClaimLost``, ``JobNotFound``, ...) before that write changes anything,
so a refused write is reported to its own caller and the batch goes on. A database error
fails the transaction: the batch is rolled back and every write of it is run again alone,
in its own transaction, exactly as ``Ledger``'s methods run it, so one bad write (a claim
whose job row is missing, say) cannot take its neighbours with it. An outage (the database
unreachable) fails them all with ``LedgerUnavailable``, as the single writes would. A batch
PostgreSQL aborted for a conflict with another transaction (a deadlock: two batches of the
same jobs locking their rows in crossing orders) is no outage: it is run again whole, a few
times (``conflicts``), and its writes fail as after an outage only if the conflict outlasts
those tries. The other writes of a batch take their jobs' rows in job id order, as its
multi-row statements do, which leaves fewer such crossings to begin with.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from sqlalchemy import exc
from sqlalchemy.engine import Connection

from shared.errors import LedgerError
from worker.ledger import call_ops, job_ops
from worker.ledger.conflicts import retry_conflicts
from worker.ledger.errors import LedgerUnavailable
from worker.ledger.store import Ledger
from worker.process.batching import Batcher, Item

__all__ = ["BATCHED_METHODS", "MARK_WINDOW_S", "GroupCommit"]

#: Ledger methods whose writes are grouped (the per-job hot path).
BATCHED_METHODS: Final = ("open_job", "open_and_claim", "claim", "finish_job", "mark_published")
_MAX_BATCH: Final = 256
_PG_WRITERS: Final = 2
#: How long a published mark (``mark_published_later``) waits for a batch to ride on
#: before it is written alone.
MARK_WINDOW_S: Final = 0.05
#: The item that only wakes a writer for the marks waiting (``mark_published_later``).
_FLUSH: Final = "flush_published"


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


class GroupCommit(Batcher):
    """Batches ``Ledger`` writes from coroutines; ``await group.claim(...)`` and so on."""

    thread_name = "ledger-group-commit"

    def __init__(
        self,
        ledger: Ledger,
        *,
        max_batch: int = _MAX_BATCH,
        writers: int | None = None,
        mark_window_s: float = MARK_WINDOW_S,
    ) -> None:
        # SQLite has one writer at a time anyway; PostgreSQL commits batches side by side, so
        # that its round trips (one a statement) overlap instead of queueing behind one thread.
        super().__init__(
            max_batch=max_batch,
            writers=writers or (1 if ledger.dialect == "sqlite" else _PG_WRITERS),
        )
        self.ledger = ledger
        self.mark_window_s = mark_window_s
        #: Jobs published whose ``published_at`` is not written yet (``mark_published_later``).
        self._later: list[str] = []
        #: Which list of marks the newest timer is for: one per list's first mark.
        self._window = 0
        #: Marks were put back after an outage with no timer of theirs: the next mark arms one.
        self._unarmed = False

    # --- the methods, awaitable -----------------------------------------------------------

    async def open_job(self, **kwargs: Any) -> Any:
        return await self.submit("open_job", kwargs)

    async def open_and_claim(self, **kwargs: Any) -> Any:
        return await self.submit("open_and_claim", kwargs)

    async def claim(self, **kwargs: Any) -> Any:
        return await self.submit("claim", kwargs)

    async def finish_job(self, **kwargs: Any) -> Any:
        return await self.submit("finish_job", kwargs)

    async def mark_published(self, **kwargs: Any) -> Any:
        return await self.submit("mark_published", kwargs)

    def mark_published_later(self, job_id: str) -> None:
        """Mark a published job published in the next batch, or ``mark_window_s`` after it.

        Not awaited: a job's stream entry exists already (its caller published it), so the
        mark only says so. It rides on the next batch's transaction instead of one of its
        own (a single-job message otherwise pays three transactions a job). Lost with the
        process (a crash before the window), the job stays unpublished in the ledger and the
        reaper's outbox relay publishes it again: the publish-once marker makes that a
        no-op, then marks it, as after a crash between a publish and its mark today."""
        with self._lock:
            self._later.append(job_id)
            first = len(self._later) == 1 or self._unarmed
            if first:
                self._unarmed = False
                self._window += 1
                window = self._window
        if first:
            asyncio.get_running_loop().call_later(self.mark_window_s, self._wake, window)

    def _wake(self, window: int) -> None:
        """On the loop, a window after the first mark of a list: a batch of its own if none
        took them. A timer whose marks a batch took is stale: the marks after them started
        a window of their own (writing them at the stale timer cost a transaction a job at
        25 single-job messages a second)."""
        with self._lock:
            if not self._later or window != self._window:
                return
        self._start()
        loop = asyncio.get_running_loop()
        self._queue.put(Item(_FLUSH, {}, loop, loop.create_future()))

    def _take_later(self) -> list[str]:
        with self._lock:
            later, self._later = self._later, []
        return later

    def flush_published(self) -> None:
        """Write the marks waiting now, in the caller's thread (a warm shutdown's last step);
        an outage leaves them to the reaper's relay."""
        later = self._take_later()
        if not later:
            return
        try:
            with self.ledger.transaction() as conn:
                job_ops.mark_many_published(conn, job_ids=later, now=self.ledger.now())
        except (LedgerError, exc.SQLAlchemyError):
            self._put_back(later)

    def close(self) -> None:
        super().close()
        self.flush_published()

    def count(self, items: int) -> None:
        super().count(items)
        # Imported here: the metrics package is the worker's (and its prometheus-client the
        # optional [metrics] extra); the ledger is a library too.
        from worker.observability.metrics.families import families

        recorded = families()
        recorded.group_commits.inc()
        recorded.group_commit_writes.inc(items)

    def _put_back(self, later: list[str]) -> None:
        # Next batch's, or the next mark's window (not a timer now: during an outage that
        # would retry every window), or the reaper's relay if neither comes.
        with self._lock:
            self._later[:0] = later
            self._unarmed = True

    # --- one batch, in the writer thread --------------------------------------------------

    def handle(self, batch: list[Item]) -> None:
        now = self.ledger.now()
        for write in batch:
            if write.method == _FLUSH:
                write.done = True
        later = self._take_later()
        if not later and all(write.method == _FLUSH for write in batch):
            return  # a batch before took the marks: no transaction for nothing
        try:
            # A batch PostgreSQL aborted for a conflict with another transaction (a deadlock
            # with a batch of the same jobs, say) is run again whole (``conflicts``).
            retry_conflicts(lambda: self._commit(batch, later, now), operation="group commit")
        except LedgerUnavailable as down:  # a conflict that outlasted its tries too
            self._put_back(later)
            for write in batch:  # an outage fails every write, as it would have alone
                if write.method != _FLUSH:
                    write.result, write.error, write.done = None, down, False
            return
        except (_Abort, LedgerError, exc.SQLAlchemyError):
            self._put_back(later)
            self._one_by_one(batch)
            return
        self.count(sum(1 for write in batch if write.method != _FLUSH))

    def _commit(self, batch: list[Item], later: list[str], now: datetime) -> None:
        """One try of the batch, in one transaction; each write's outcome set on it."""
        for write in batch:  # a try before was rolled back: what it set is void
            if write.method != _FLUSH:
                write.result, write.error, write.done = None, None, False
        with self.ledger.transaction() as conn:
            if later:
                # Finished and unpublished rows only: one published before keeps its stamp.
                job_ops.mark_many_published(conn, job_ids=later, now=now)
            self._mark_published_at_once(conn, now, batch)
            self._open_and_claim_at_once(conn, now, batch)
            self._finish_at_once(conn, now, batch)
            # In job id order (a stable sort: one job's writes keep their order), as the
            # opening and finishing statements above take theirs: two batches of the same
            # jobs then lock those rows in one order and one waits for the other, where in
            # their orders of arrival they could deadlock (a judgment claim locks its job's
            # row for update). Any order of a batch's pending writes is one they could have
            # come in.
            for write in sorted(batch, key=_job_id):
                if write.done:  # by one of the statements above
                    continue
                try:
                    write.result = _OPS[write.method](conn, now, write.kwargs)
                except (LedgerError, ValueError) as refused:
                    if _from_database(refused):
                        # The statement failed in the database (PostgreSQL has now
                        # aborted the transaction): no write of this batch may stand.
                        raise _Abort from refused
                    write.error = refused  # refused before it changed anything

    @staticmethod
    def _mark_published_at_once(conn: Connection, now: datetime, batch: list[Item]) -> None:
        """The batch's ``mark_published`` writes as one UPDATE, when every one of them applies.

        Most batches hold dozens (one a job just published); one statement for them all, and
        only if some row did not change (published before, or not finished: rare) are they
        run one by one, each with its own verdict. Marking published commutes with the
        batch's other writes: they never touch a published job's ``published_at``."""
        ids = [w.kwargs["job_id"] for w in batch if w.method == "mark_published"]
        if len(ids) < 2 or len(set(ids)) != len(ids):
            return
        if job_ops.mark_many_published(conn, job_ids=ids, now=now) != len(ids):
            # Not all applied: the statement changed some rows; each write's own run below
            # finds its row published (a no-op) or says why it cannot be.
            return
        for write in batch:
            if write.method == "mark_published":
                write.result, write.done = None, True

    @staticmethod
    def _open_and_claim_at_once(conn: Connection, now: datetime, batch: list[Item]) -> None:
        """The batch's ``open_and_claim`` writes of new jobs as two statements, not two each.

        The writes of a batch are all pending at once, so any order of them is one they
        could have arrived in: opening the new jobs first is such an order. A job already
        there (a redelivery) is left to its own write, which reads it and checks its
        fingerprint; so is a job named twice in the batch."""
        named = Counter(w.kwargs["job"]["job_id"] for w in batch if w.method == "open_and_claim")
        writes = [
            w
            for w in batch
            if w.method == "open_and_claim" and named[w.kwargs["job"]["job_id"]] == 1
        ]
        if len(writes) < 2:
            return
        done = job_ops.open_and_claim_many(conn, writes=[w.kwargs for w in writes], now=now)
        for write in writes:
            result = done.get(write.kwargs["job"]["job_id"])
            if result is not None:
                write.result, write.done = result, True

    @staticmethod
    def _finish_at_once(conn: Connection, now: datetime, batch: list[Item]) -> None:
        """The batch's ``finish_job`` writes as three statements, not three each.

        As for opening, any order of a batch's pending writes is one they could have come
        in. A write its own run would refuse (a bad message type or outcome, a job not
        found, a job named twice in the batch) is left to that run, to say why."""
        named = Counter(w.kwargs["job_id"] for w in batch if w.method == "finish_job")
        writes = [
            w
            for w in batch
            if w.method == "finish_job" and named[w.kwargs["job_id"]] == 1 and _checks(w)
        ]
        if len(writes) < 2:
            return
        kwargs = [{"outcome": None, **w.kwargs} for w in writes]
        done = job_ops.finish_many(conn, writes=kwargs, now=now)
        for write in writes:
            result = done.get(write.kwargs["job_id"])
            if result is not None:
                write.result, write.done = result, True

    def _one_by_one(self, batch: list[Item]) -> None:
        for write in batch:
            if write.method == _FLUSH:
                continue
            write.result, write.error, write.done = None, None, False
            try:
                write.result = getattr(self.ledger, write.method)(**write.kwargs)
            except BaseException as error:
                write.error = error
            else:
                self.count(1)


def _job_id(write: Item) -> str:
    """The job a write is for (``open_and_claim`` names it in its job; a flush, none)."""
    kwargs = write.kwargs
    return str(kwargs.get("job_id") or kwargs.get("job", {}).get("job_id") or "")


def _checks(write: Item) -> bool:
    try:
        job_ops.check_finish(write.kwargs["message_type"], write.kwargs.get("outcome"))
    except ValueError:
        return False
    return True


class _Abort(Exception):
    """A write's statement failed in the database: run the batch's writes one by one."""


def _from_database(error: BaseException) -> bool:
    cause = error.__cause__ or error.__context__
    return isinstance(cause, exc.SQLAlchemyError)
