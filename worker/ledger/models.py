"""The ledger's tables, as SQLAlchemy Core metadata.

This is what the code reads and writes; the schema itself is created by the Alembic
migrations in ``migrations/versions`` (frozen copies, so that an old migration never
changes when this file does). ``tests/ledger`` checks that the two agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.types import TypeDecorator

__all__ = ["NAMING_CONVENTION", "UTCDateTime", "calls", "jobs", "metadata", "to_utc"]

# Named constraints, so that later migrations (batch mode on SQLite) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def to_utc(value: datetime) -> datetime:
    """An aware datetime in UTC. A naive one is refused: its zone would be a guess."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()} given to the ledger; use UTC")
    return value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC in, aware UTC out, on every backend.

    SQLite has no time zones: values are stored as naive UTC text, whose fixed-width format
    keeps string comparison (``lease_expires < now``) in time order. PostgreSQL stores
    ``timestamptz``; its values are converted back to UTC whatever the session zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = to_utc(value)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


jobs = Table(
    "jobs",
    metadata,
    Column("job_id", String, primary_key=True),
    Column("kind", String, nullable=False),
    Column("batch", String, nullable=True, index=True),
    Column("reply_to", String, nullable=False),
    Column("fingerprint", String, nullable=False),
    Column("deadline", UTCDateTime, nullable=False),
    Column("job_json", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("terminal_type", String, nullable=True),
    Column("terminal_reason", String, nullable=True),
    Column("terminal_message", Text, nullable=True),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("published_at", UTCDateTime, nullable=True),
    CheckConstraint(
        "terminal_type IS NULL OR terminal_type IN ('result', 'escalation', 'rejected')",
        name="terminal_type",
    ),
    # The outbox is all or nothing: a type without its message (or the reverse) is a bug.
    CheckConstraint(
        "(terminal_type IS NULL AND terminal_message IS NULL AND finished_at IS NULL)"
        " OR (terminal_type IS NOT NULL AND terminal_message IS NOT NULL"
        " AND finished_at IS NOT NULL)",
        name="terminal_complete",
    ),
    CheckConstraint(
        "published_at IS NULL OR terminal_message IS NOT NULL", name="published_after_finish"
    ),
)

# What the outbox relay scans: small however large the table grows.
Index(
    "ix_jobs_unpublished",
    jobs.c.finished_at,
    sqlite_where=text("terminal_type IS NOT NULL AND published_at IS NULL"),
    postgresql_where=text("terminal_type IS NOT NULL AND published_at IS NULL"),
)

calls = Table(
    "calls",
    metadata,
    Column("job_id", String, ForeignKey("jobs.job_id"), nullable=False),
    Column("step", String, nullable=False),
    Column("provider", String, nullable=False),
    Column("model", String, nullable=True),
    Column("request_sha256", String, nullable=True),
    Column("status", String, nullable=False, index=True),
    Column("lease_expires", UTCDateTime, nullable=False),
    Column("claims", Integer, nullable=False, server_default=text("1")),
    Column("claimed_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("cost_usd", Float, nullable=True),
    Column("cost_basis", String, nullable=True),
    Column("error_code", String, nullable=True),
    Column("receipt_json", Text, nullable=True),
    Column("outcome_json", Text, nullable=True),
    # Set on the calls of jobs packed into one request (``worker.packs``): the request is
    # counted once, and each member's row holds its own answers and its share of the cost.
    Column("pack_id", String, nullable=True, index=True),
    PrimaryKeyConstraint("job_id", "step"),
    CheckConstraint(
        "status IN ('claimed', 'answered', 'failed', 'not_sent', 'unknown')", name="status"
    ),
    CheckConstraint("claims >= 1", name="claims_positive"),
    CheckConstraint(
        "cost_basis IS NULL OR cost_basis IN ('reported', 'estimate')", name="cost_basis"
    ),
    CheckConstraint("cost_usd IS NULL OR cost_usd >= 0", name="cost_not_negative"),
)
