"""The ledger's tables, as SQLAlchemy Core metadata.

This is what the code reads and writes; the schema itself is created by the Alembic
migrations in ``migrations/versions`` (frozen copies, so that an old migration never
changes when this file does). ``tests/ledger`` checks that the two agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
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
    UniqueConstraint,
    text,
)
from sqlalchemy.types import TypeDecorator

__all__ = [
    "NAMING_CONVENTION",
    "UTCDateTime",
    "budgets",
    "calls",
    "jobs",
    "labels",
    "labels_set_aside",
    "metadata",
    "resolutions",
    "to_utc",
]

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
    # Times ``decisions budget resume`` reopened the job (worker.ledger.budget_ops).
    Column("resumes", Integer, nullable=False, server_default=text("0")),
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
    # Set on the calls of jobs packed into one request (``worker.kinds.packs``): the request is
    # counted once, and each member's row holds its own answers and its share of the cost.
    Column("pack_id", String, nullable=True, index=True),
    # The worst case reserved at the claim, and the budgets it was reserved against (space
    # separated scopes, ``worker.ledger.budget_ops``); NULL: no budget covered the call.
    Column("reserved_usd", Float, nullable=True),
    Column("budget_scopes", String, nullable=True),
    # How far past the moment its holder last wrote it the lease may be (seconds): what its
    # holder's own settings gave it (``worker.ledger.leases``). A delivery that meets the
    # claim judges the lease by it, not by its own settings, which another fleet's may
    # exceed. NULL: written before revision 0007.
    Column("lease_reach_s", Float, nullable=True),
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

# A reviewer's answer to a machine answer (``shared.labels``): what calibration measures. No
# foreign key to ``jobs``: a label is kept even if its job's row is archived or was written
# by another ledger; one label per job and question (a job is resolved at most once).
labels = Table(
    "labels",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String, nullable=False),
    Column("question_id", String, nullable=False),
    Column("batch", String, nullable=True, index=True),
    Column("question_type", String, nullable=False),
    Column("provider", String, nullable=True),
    Column("model", String, nullable=True),
    Column("machine_answer", Text, nullable=True),
    Column("probability", Float, nullable=True),
    Column("confidence", Float, nullable=True),
    Column("human_answer", Text, nullable=True),
    Column("correct", Boolean, nullable=False),
    Column("reviewer", String, nullable=False),
    Column("resolved_at", UTCDateTime, nullable=False, index=True),
    Column("source", String, nullable=False),
    Column("reason", String, nullable=False),
    Column("weight", Float, nullable=False, server_default=text("1")),
    Column("entry_id", String, nullable=True),
    Column("stored_at", UTCDateTime, nullable=False),
    UniqueConstraint("job_id", "question_id", name="uq_labels_job_question"),
    CheckConstraint("source IN ('audit', 'escalation')", name="source"),
    # A Label's own bounds (shared.labels; MIN_WEIGHT and MAX_WEIGHT of shared.calibration):
    # what the figures can count. Ranges, not ``> 0``: on PostgreSQL NaN compares greater than
    # every number, so only an upper bound refuses it (revision 0005).
    CheckConstraint(
        "probability IS NULL OR (probability >= 0 AND probability <= 1)",
        name="probability_share",
    ),
    CheckConstraint(
        "confidence IS NULL OR (confidence >= 0 AND confidence <= 1)", name="confidence_share"
    ),
    CheckConstraint("weight >= 1e-9 AND weight <= 1e9", name="weight_bounded"),
)

# What calibration groups by, and what a calibrated threshold looks up.
Index("ix_labels_question", labels.c.question_id, labels.c.provider, labels.c.model)

# Labels revision 0005 found out of bounds, moved here whole (their ids too) rather than
# deleted: a reviewer's answer cannot be made again. Nothing reads it; a person may mend a
# row and put it back in ``labels``, or delete it.
labels_set_aside = Table(
    "labels_set_aside",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("job_id", String, nullable=False),
    Column("question_id", String, nullable=False),
    Column("batch", String, nullable=True),
    Column("question_type", String, nullable=False),
    Column("provider", String, nullable=True),
    Column("model", String, nullable=True),
    Column("machine_answer", Text, nullable=True),
    Column("probability", Float, nullable=True),
    Column("confidence", Float, nullable=True),
    Column("human_answer", Text, nullable=True),
    Column("correct", Boolean, nullable=False),
    Column("reviewer", String, nullable=False),
    Column("resolved_at", UTCDateTime, nullable=False),
    Column("source", String, nullable=False),
    Column("reason", String, nullable=False),
    Column("weight", Float, nullable=False),
    Column("entry_id", String, nullable=True),
    Column("stored_at", UTCDateTime, nullable=False),
    Column("set_aside_at", UTCDateTime, nullable=False),
)

# A job a reviewer resolved (revision 0006): every resolution, whether or not it made labels
# (a refused decision gives no machine answer to label). ``decisions ledger republish`` reads
# it so that a Redis that forgot its resolved records does not reopen the job.
resolutions = Table(
    "resolutions",
    metadata,
    Column("job_id", String, primary_key=True),
    Column("reviewer", String, nullable=False),
    Column("resolved_at", UTCDateTime, nullable=False),
    Column("entry_id", String, nullable=True),
    Column("stored_at", UTCDateTime, nullable=False),
)

# A budget (``worker.ledger.budget_ops``): ``batch:<name>`` or ``day:<provider>:<date>``.
# ``committed_usd`` is the running total of what its calls hold: the reservation of each call
# in flight or of unknown cost, the booked cost of each settled one; it changes only in the
# transactions that claim and settle those calls.
budgets = Table(
    "budgets",
    metadata,
    Column("scope", String, primary_key=True),
    Column("limit_usd", Float, nullable=True),
    Column("committed_usd", Float, nullable=False, server_default=text("0")),
    Column("updated_at", UTCDateTime, nullable=False),
    CheckConstraint("limit_usd IS NULL OR limit_usd >= 0", name="limit_not_negative"),
)
