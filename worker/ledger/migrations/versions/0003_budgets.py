"""Budgets that fail closed: a budgets table, each call's reservation, and job resumes.

- ``budgets``: one row a budget (``batch:<name>``, or ``day:<provider>:<YYYY-MM-DD>`` for a
  fleet's daily ceiling), with its limit and the running total of what is committed against
  it (reservations of calls in flight or of unknown cost, and booked costs).
- ``calls.reserved_usd`` / ``calls.budget_scopes``: the worst case reserved when the call was
  claimed, and the budgets it was reserved against (settled against the same ones).
- ``jobs.resumes``: how many times ``decisions budget resume`` reopened the job (its later
  terminal message is published under a marker of its own).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Copied, not imported from models.py, so that this migration never changes after release.
_UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("limit_usd", sa.Float(), nullable=True),
        sa.Column("committed_usd", sa.Float(), nullable=False, server_default=sa.text("0")),
        sa.Column("updated_at", _UTC, nullable=False),
        sa.PrimaryKeyConstraint("scope", name="pk_budgets"),
        sa.CheckConstraint(
            "limit_usd IS NULL OR limit_usd >= 0", name="ck_budgets_limit_not_negative"
        ),
    )
    # Nullable, no default: calls claimed before had no budget, which NULL says.
    op.add_column("calls", sa.Column("reserved_usd", sa.Float(), nullable=True))
    op.add_column("calls", sa.Column("budget_scopes", sa.String(), nullable=True))
    op.add_column(
        "jobs", sa.Column("resumes", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resumes")
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("budget_scopes")
        batch.drop_column("reserved_usd")
    op.drop_table("budgets")
