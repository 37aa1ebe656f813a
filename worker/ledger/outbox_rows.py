"""The outbox's backlog as SQL on one connection: finished jobs whose message is unpublished.

Read for the relay (``worker.recovery.reaper.relay_outbox``), oldest first and a page at a
time. A row whose time stamps do not parse comes back as ``UnreadableJob`` instead of failing
the page: the relay logs it and publishes the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import String, bindparam, select, tuple_, type_coerce
from sqlalchemy.engine import Connection

from worker.ledger.models import UTCDateTime, jobs
from worker.ledger.rows import JobRow

__all__ = ["OUTBOX_GRACE_S", "UnreadableJob", "unpublished"]

#: How long a stored message may wait for its own delivery to publish it (and mark it
#: published) before it counts as backlog: the reaper's relay publishes it then, and the
#: backlog gauge counts it from then on.
OUTBOX_GRACE_S = 10.0

#: The columns parsed in Python on their way out (SQLite stores them as text).
_TIMES = tuple(c.name for c in jobs.c if isinstance(c.type, UTCDateTime))


@dataclass(frozen=True)
class UnreadableJob:
    """An unpublished job whose row does not parse: ``column`` holds what SQLite kept as
    written (a word, a number), so the row cannot be read, nor its message relayed."""

    job_id: str
    column: str


def unpublished(
    conn: Connection, *, limit: int, after: tuple[datetime, str] | None = None
) -> list[JobRow | UnreadableJob]:
    """Up to ``limit`` finished, unpublished jobs, oldest first, after ``after`` (a row's
    ``(finished_at, job_id)``) if given."""
    # The time columns are read as stored and parsed here, one row at a time. SQLite keeps
    # whatever was written to them (by hand, by a script), and a value the driver's result
    # processing cannot parse would fail the whole page, so one bad row would halt the relay
    # for every row. Ordering and paging are SQL's: they parse nothing.
    stmt = (
        select(*(type_coerce(c, String).label(c.name) if c.name in _TIMES else c for c in jobs.c))
        .where(jobs.c.terminal_type.is_not(None) & jobs.c.published_at.is_(None))
        .order_by(jobs.c.finished_at, jobs.c.job_id)
        .limit(limit)
    )
    if after is not None:
        stmt = stmt.where(
            tuple_(jobs.c.finished_at, jobs.c.job_id)
            > tuple_(
                bindparam("k_after_at", after[0], type_=jobs.c.finished_at.type),
                bindparam("k_after_id", after[1], type_=String()),
            )
        )
    dialect = conn.dialect
    parsers = {
        name: jobs.c[name].type.dialect_impl(dialect).result_processor(dialect, None)
        for name in _TIMES
    }
    found: list[JobRow | UnreadableJob] = []
    for raw in conn.execute(stmt):
        values = dict(raw._mapping)
        bad = None
        for name, parse in parsers.items():
            if parse is None:
                continue
            try:
                values[name] = parse(values[name])
            except (ValueError, TypeError):
                bad = name
                break
        found.append(JobRow(**values) if bad is None else UnreadableJob(values["job_id"], bad))
    return found
