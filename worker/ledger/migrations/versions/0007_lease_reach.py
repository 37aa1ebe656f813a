"""Lease reach: each claim keeps how far past its holder's last write its lease may lie.

A delivery that meets another's live claim waits for it while its lease runs, but books
``unknown`` a lease further off than a worker could have been given (a damaged row, say year
9999). It judged "could have been given" by its own ``lease_margin_s`` and
``deadline_ceiling_s``: a claim made by a fleet with larger ones (a rolling deploy changing
either) was a live, paid call booked ``unknown`` and escalated while in flight, and its
answer thrown away. ``lease_reach_s`` holds what the holder's own settings gave its lease
(``worker.ledger.leases``), for the reader to judge it by.

Nullable, no default: a call claimed before this revision has no reach a reader could
trust, and NULL says so; such a claim is judged by the reader's own settings, as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("calls", sa.Column("lease_reach_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("lease_reach_s")
