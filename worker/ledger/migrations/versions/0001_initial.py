"""The ledger's first schema: jobs (with their outbox) and calls.

Revision ID: 0001
Revises:
Create Date: 2025-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Copied, not imported from models.py, so that this migration never changes after release.
# worker.ledger.models.UTCDateTime adapts values of exactly this column type.
_UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("batch", sa.String(), nullable=True),
        sa.Column("reply_to", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("deadline", _UTC, nullable=False),
        sa.Column("job_json", sa.Text(), nullable=False),
        sa.Column("created_at", _UTC, nullable=False),
        sa.Column("terminal_type", sa.String(), nullable=True),
        sa.Column("terminal_reason", sa.String(), nullable=True),
        sa.Column("terminal_message", sa.Text(), nullable=True),
        sa.Column("finished_at", _UTC, nullable=True),
        sa.Column("published_at", _UTC, nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_jobs"),
        sa.CheckConstraint(
            "terminal_type IS NULL OR terminal_type IN ('result', 'escalation', 'rejected')",
            name="ck_jobs_terminal_type",
        ),
        sa.CheckConstraint(
            "(terminal_type IS NULL AND terminal_message IS NULL AND finished_at IS NULL)"
            " OR (terminal_type IS NOT NULL AND terminal_message IS NOT NULL"
            " AND finished_at IS NOT NULL)",
            name="ck_jobs_terminal_complete",
        ),
        sa.CheckConstraint(
            "published_at IS NULL OR terminal_message IS NOT NULL",
            name="ck_jobs_published_after_finish",
        ),
    )
    op.create_index("ix_jobs_batch", "jobs", ["batch"])
    op.create_index(
        "ix_jobs_unpublished",
        "jobs",
        ["finished_at"],
        sqlite_where=sa.text("terminal_type IS NOT NULL AND published_at IS NULL"),
        postgresql_where=sa.text("terminal_type IS NOT NULL AND published_at IS NULL"),
    )
    op.create_table(
        "calls",
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("step", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("request_sha256", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("lease_expires", _UTC, nullable=False),
        sa.Column("claims", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("claimed_at", _UTC, nullable=False),
        sa.Column("finished_at", _UTC, nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("cost_basis", sa.String(), nullable=True),
        sa.Column("error_code", sa.String(), nullable=True),
        sa.Column("receipt_json", sa.Text(), nullable=True),
        sa.Column("outcome_json", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "step", name="pk_calls"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.job_id"], name="fk_calls_job_id_jobs"),
        sa.CheckConstraint(
            "status IN ('claimed', 'answered', 'failed', 'not_sent', 'unknown')",
            name="ck_calls_status",
        ),
        sa.CheckConstraint("claims >= 1", name="ck_calls_claims_positive"),
        sa.CheckConstraint(
            "cost_basis IS NULL OR cost_basis IN ('reported', 'estimate')",
            name="ck_calls_cost_basis",
        ),
        sa.CheckConstraint("cost_usd IS NULL OR cost_usd >= 0", name="ck_calls_cost_not_negative"),
    )
    op.create_index("ix_calls_status", "calls", ["status"])


def downgrade() -> None:
    op.drop_index("ix_calls_status", table_name="calls")
    op.drop_table("calls")
    op.drop_index("ix_jobs_unpublished", table_name="jobs")
    op.drop_index("ix_jobs_batch", table_name="jobs")
    op.drop_table("jobs")
