"""Packed calls: jobs whose questions went out in one shared request carry its ``pack_id``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: existing calls were each their own request, which NULL says.
    op.add_column("calls", sa.Column("pack_id", sa.String(), nullable=True))
    op.create_index("ix_calls_pack_id", "calls", ["pack_id"])


def downgrade() -> None:
    op.drop_index("ix_calls_pack_id", table_name="calls")
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("pack_id")
