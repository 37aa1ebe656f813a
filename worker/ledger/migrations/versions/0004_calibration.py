"""Calibration: reviewers' answers to machine answers, stored as labels.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A frozen copy of worker.ledger.models.labels as this revision made it.
    op.create_table(
        "labels",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("question_id", sa.String(), nullable=False),
        sa.Column("batch", sa.String(), nullable=True),
        sa.Column("question_type", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("machine_answer", sa.Text(), nullable=True),
        sa.Column("probability", sa.Float(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("human_answer", sa.Text(), nullable=True),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("reviewer", sa.String(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False, server_default=sa.text("1")),
        sa.Column("entry_id", sa.String(), nullable=True),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_labels"),
        sa.UniqueConstraint("job_id", "question_id", name="uq_labels_job_question"),
        sa.CheckConstraint("source IN ('audit', 'escalation')", name="ck_labels_source"),
        sa.CheckConstraint("weight > 0", name="ck_labels_weight_positive"),
    )
    op.create_index("ix_labels_batch", "labels", ["batch"])
    op.create_index("ix_labels_resolved_at", "labels", ["resolved_at"])
    op.create_index("ix_labels_question", "labels", ["question_id", "provider", "model"])


def downgrade() -> None:
    op.drop_index("ix_labels_question", table_name="labels")
    op.drop_index("ix_labels_resolved_at", table_name="labels")
    op.drop_index("ix_labels_batch", table_name="labels")
    op.drop_table("labels")
