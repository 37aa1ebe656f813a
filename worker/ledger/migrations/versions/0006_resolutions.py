"""Resolutions: one row a job a reviewer resolved, labels or not.

A resolution reached the ledger only through its labels (``labels``), and a resolution makes
none when the machine gave no answer to compare (a refused decision, a failure, a deadline):
after a Redis that forgot everything, ``decisions ledger republish`` could not tell such a
job was resolved, put its escalation back, and a second reviewer resolved it again with
another answer. ``resolutions`` holds every resolution the label stream carries.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "resolutions",
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("reviewer", sa.String(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("entry_id", sa.String(), nullable=True),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_resolutions"),
    )


def downgrade() -> None:
    op.drop_table("resolutions")
