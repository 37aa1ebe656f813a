"""``Ledger``: the at-most-once record of every paid call, one committed transaction a method.

Every method runs in its own transaction and returns only after it committed, so a ``Claim``
with ``fresh=True`` is durable before the caller sends a byte. Database errors that mean
the ledger cannot be reached (or SQLite stayed locked past the busy timeout) are raised as
``shared.errors.LedgerError``: the caller must not send. Nothing is retried here, because
whether a retry is safe depends on the step, which only the runner knows; but a write
transaction PostgreSQL aborted for a conflict with another (a deadlock, a serialization
failure) is run again whole, a few times (``conflicts_retried``): nothing of it was
committed, so running it again is running it once.

Create a ``Ledger`` in the process that uses it (after any fork): its engine holds open
connections, which must never be shared across a fork. A Ledger used in a forked child
raises ``LedgerError`` rather than corrupt the parent's connections. Within one process a
Ledger is thread-safe (each transaction checks out its own pooled connection).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

from sqlalchemy import Engine, exc
from sqlalchemy.engine import Connection, make_url

from shared.errors import LedgerError
from shared.labels import Label
from shared.settings import Settings
from worker.ledger import job_ops, label_ops, outbox_rows, schema
from worker.ledger.budget_store import BudgetMethods
from worker.ledger.call_store import CallMethods
from worker.ledger.clock import DatabaseClock, database_time
from worker.ledger.conflicts import conflicts_retried
from worker.ledger.engine import READ_ONLY, describe_url, make_engine, translate_error
from worker.ledger.errors import LedgerUnavailable
from worker.ledger.label_ops import LabelFilter, LabelRow
from worker.ledger.models import to_utc
from worker.ledger.report import ledger_status
from worker.ledger.rows import BudgetRefusal, CallOutcome, Claim, JobRow, LedgerStatus

__all__ = ["MIGRATE_WAIT_S", "Ledger"]


#: How long a SQLite migration tries again while another holds the write lock.
MIGRATE_WAIT_S = 60.0


class Ledger(CallMethods, BudgetMethods):
    """The ledger's one entry point: its plumbing, schema, jobs, labels and status here, its
    calls (``call_store``) and budgets (``budget_store``) inherited."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = 5.0,
        echo: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._url = make_url(url)
        self._engine = make_engine(self._url, busy_timeout_s=busy_timeout_s, echo=echo)
        self._pid = os.getpid()
        #: The database's time (``worker.ledger.clock``); a test may give its own clock.
        self._clock = clock or DatabaseClock(self._database_time)

    @classmethod
    def from_settings(cls, settings: Settings) -> Ledger:
        return cls(settings.ledger_url, busy_timeout_s=settings.sqlite_busy_timeout_s)

    # --- plumbing ------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engine

    @functools.cached_property
    def url(self) -> str:
        """The ledger's URL with the password hidden, fit for logs. Rendered once: every
        conditional write names it to its outage handling (1% of a single-job worker's CPU
        when it was rendered each time)."""
        return describe_url(self._url)

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def __repr__(self) -> str:
        return f"Ledger({self.url!r})"

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.dispose()

    def dispose(self) -> None:
        """Close the pooled connections (in the creating process only)."""
        if os.getpid() == self._pid:
            self._engine.dispose()

    def now(self) -> datetime:
        """The ledger's clock (the database's time): leases, deadlines and expiry are judged
        by it alone, never by a worker's or a producer's clock."""
        return to_utc(self._clock())

    def _database_time(self) -> datetime:
        with self.transaction(read_only=True) as conn:
            return database_time(conn)

    @contextmanager
    def transaction(self, *, read_only: bool = False) -> Iterator[Connection]:
        """One transaction, committed on leaving the block; DB outages become LedgerError."""
        if os.getpid() != self._pid:
            raise LedgerError(
                f"this Ledger was created in process {self._pid} and used in {os.getpid()} "
                "after a fork; create the Ledger in the process that uses it "
                "(e.g. in Celery's worker_process_init)"
            )
        try:
            with self._engine.connect() as conn:
                if read_only:
                    conn.execution_options(**{READ_ONLY: True})
                with conn.begin():
                    yield conn
        except exc.SQLAlchemyError as error:
            translated = translate_error(error, self._url)
            if translated is None:
                raise
            raise translated from error

    # --- schema --------------------------------------------------------------------------

    def migrate(self) -> None:
        """``alembic upgrade head`` in one transaction; safe to run from several workers.

        On SQLite a migration that meets another's lock past the busy timeout (workers
        started together with ``--migrate`` on a loaded machine: "database is locked") is
        tried again, for up to ``MIGRATE_WAIT_S``: it rolled back whole, and the next try
        finds the schema where the other left it. PostgreSQL waits on its advisory lock."""
        deadline = time.monotonic() + MIGRATE_WAIT_S
        while True:
            try:
                with self.transaction() as conn:
                    schema.migrate(conn)
                return
            except LedgerUnavailable as exc:
                locked = self.engine.dialect.name == "sqlite" and "locked" in str(exc)
                if not locked or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def check_schema(self) -> None:
        """Raise ``SchemaBehind`` unless the schema is at this code's head revision."""
        with self.transaction(read_only=True) as conn:
            schema.check_schema(conn)

    def current_revision(self) -> str | None:
        with self.transaction(read_only=True) as conn:
            return schema.current_revision(conn)

    @staticmethod
    def head_revision() -> str:
        return schema.head_revision()

    # --- jobs ----------------------------------------------------------------------------

    @conflicts_retried
    def open_job(
        self,
        *,
        job_id: str,
        kind: str,
        batch: str | None,
        reply_to: str,
        fingerprint: str,
        deadline: datetime,
        job_json: str,
    ) -> JobRow:
        """Insert the job or read it back; ``JobConflict`` if its fingerprint differs.

        On redelivery the stored row is returned unchanged: its deadline is the one that
        counts, whatever this delivery computed.
        """
        with self.transaction() as conn:
            return job_ops.open_or_read(
                conn,
                job_id=job_id,
                kind=kind,
                batch=batch,
                reply_to=reply_to,
                fingerprint=fingerprint,
                deadline=deadline,
                job_json=job_json,
                now=self.now(),
            )[0]

    @conflicts_retried
    def open_and_claim(
        self, *, job: dict[str, Any], claim: dict[str, Any]
    ) -> tuple[JobRow, Claim | BudgetRefusal | None]:
        """``open_job`` with ``job``'s arguments and, for a job this inserted (so with no call
        yet) whose deadline is ahead, ``claim`` with ``claim``'s, in one transaction: a new
        job's claim costs no commit of its own. The claim is None for a job read back (or
        late): the caller then goes on as after ``open_job``; a ``BudgetRefusal`` when a
        budget could not take the request (``claim["budget"]``): the job is open, nothing
        claimed."""
        with self.transaction() as conn:
            return job_ops.open_and_claim(conn, job=job, claim=claim, now=self.now())

    def get_job(self, job_id: str) -> JobRow | None:
        with self.transaction(read_only=True) as conn:
            return job_ops.read_job(conn, job_id)

    @conflicts_retried
    def finish_job(
        self,
        *,
        job_id: str,
        message_type: str,
        reason: str | None,
        message_json: str,
        outcome: CallOutcome | None = None,
    ) -> JobRow:
        """Record the last call's outcome (if given) and store the terminal message, at once.

        If the job already has a terminal message, nothing changes (not even ``outcome``)
        and the stored row is returned: publish its message, not yours. If ``outcome``
        cannot be recorded (``ClaimLost``: the call was expired meanwhile) the message is
        not stored either; the runner then finishes the job as the stored call says.
        """
        with self.transaction() as conn:
            return job_ops.finish_job(
                conn,
                job_id=job_id,
                message_type=message_type,
                reason=reason,
                message_json=message_json,
                outcome=outcome,
                now=self.now(),
            )

    @conflicts_retried
    def mark_published(self, job_id: str) -> None:
        """Note that the terminal message went out; idempotent, the first time stamp stays."""
        with self.transaction() as conn:
            job_ops.mark_published(conn, job_id=job_id, now=self.now())

    def unpublished(
        self, limit: int = 1000, *, after: tuple[datetime, str] | None = None
    ) -> list[JobRow | outbox_rows.UnreadableJob]:
        """Finished jobs whose message is not published yet, oldest first (``outbox_rows``)."""
        with self.transaction(read_only=True) as conn:
            return outbox_rows.unpublished(conn, limit=limit, after=after)

    # --- labels (calibration) ----------------------------------------------------------

    @conflicts_retried
    def store_labels(
        self,
        found: Sequence[tuple[Label, datetime, str | None]],
        resolved: Sequence[label_ops.Resolved] = (),
    ) -> int:
        """Store ``(label, resolved_at, entry id)`` each once, and each resolution (labels
        or not), in one transaction; how many labels were new."""
        with self.transaction() as conn:
            label_ops.store_resolutions(conn, resolved, now=self.now())
            return label_ops.store_labels(conn, found, now=self.now())

    def resolved(self, job_id: str) -> bool:
        """Whether a reviewer resolved the job (its escalation, or its audit)."""
        with self.transaction(read_only=True) as conn:
            return label_ops.resolved(conn, job_id)

    def labels(self, where: LabelFilter | None = None) -> list[LabelRow]:
        with self.transaction(read_only=True) as conn:
            return label_ops.read_labels(conn, where)

    def status(self, batch: str | None = None) -> LedgerStatus:
        with self.transaction(read_only=True) as conn:
            return ledger_status(conn, batch)
