"""Labels in bounds: the ledger refuses a probability or confidence outside [0, 1] and a weight
outside [1e-9, 1e9], NaN and the infinities included; rows already out of bounds are set
aside in ``labels_set_aside``.

0004's ``CHECK (weight > 0)`` let NaN through on PostgreSQL (there NaN compares greater than
every number) and an infinite weight through on both databases. A range check refuses both:
NaN is not ``<= 1e9`` on PostgreSQL, and SQLite has no NaN (its driver binds one as NULL,
which the NOT NULL weight refuses; a NaN probability becomes no probability at all).

Rows that break the new checks are moved, whole and with their ids, to ``labels_set_aside``
rather than deleted: each is a reviewer's answer, which nothing can make again (its stream
entry was deleted once stored), and only its weight or the machine's numbers are wrong; a
person may mend one and put it back, or delete it. No figure changes: the statistics left
every such row out already (``shared.calibration.countable``), save one weighing less than
1e-9, which they now leave out too (its square underflows). Nothing reads the table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here, not read from shared.calibration, so that this revision never changes: the
# bounds of a Label (MIN_WEIGHT, MAX_WEIGHT) as this revision made them.
_CHECKS = {
    "ck_labels_probability_share": "probability IS NULL OR (probability >= 0 AND probability <= 1)",
    "ck_labels_confidence_share": "confidence IS NULL OR (confidence >= 0 AND confidence <= 1)",
    "ck_labels_weight_bounded": "weight >= 1e-9 AND weight <= 1e9",
}
# 0004's, as it is named in the database: its migration ran under the naming convention,
# which prefixed the name it was given a second time. Every name here is given as final
# (``op.f``), or the convention would prefix it again.
_OLD_WEIGHT_CHECK = "ck_labels_ck_labels_weight_positive"
_COLUMNS = (
    "id, job_id, question_id, batch, question_type, provider, model, machine_answer, "
    "probability, confidence, human_answer, correct, reviewer, resolved_at, source, reason, "
    "weight, entry_id, stored_at"
)
# The database's time, as the ledger keeps it (worker.ledger.models.UTCDateTime: naive UTC
# text of a fixed width on SQLite).
_NOW = {
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'",
    "postgresql": "CURRENT_TIMESTAMP",
}


def _labels_0004() -> sa.Table:
    """The labels table as 0004 made it, for SQLite's rebuild (batch mode) to copy: its checks
    and indexes named as they are, not left to what reflection finds."""
    return sa.Table(
        "labels",
        sa.MetaData(),
        sa.Column("id", sa.Integer(), nullable=False),
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
        sa.CheckConstraint("source IN ('audit', 'escalation')", name="ck_labels_ck_labels_source"),
        sa.CheckConstraint("weight > 0", name=_OLD_WEIGHT_CHECK),
        sa.Index("ix_labels_batch", "batch"),
        sa.Index("ix_labels_resolved_at", "resolved_at"),
        sa.Index("ix_labels_question", "question_id", "provider", "model"),
    )


def upgrade() -> None:
    op.create_table(
        "labels_set_aside",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=False),
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
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("entry_id", sa.String(), nullable=True),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("set_aside_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_labels_set_aside"),
    )
    in_bounds = " AND ".join(f"({check})" for check in _CHECKS.values())
    now = _NOW[op.get_context().dialect.name]
    op.execute(
        f"INSERT INTO labels_set_aside ({_COLUMNS}, set_aside_at) "
        f"SELECT {_COLUMNS}, {now} FROM labels WHERE NOT ({in_bounds})"
    )
    op.execute(f"DELETE FROM labels WHERE NOT ({in_bounds})")
    with op.batch_alter_table("labels", copy_from=_labels_0004()) as batch:
        batch.drop_constraint(op.f(_OLD_WEIGHT_CHECK), type_="check")
        for name, check in _CHECKS.items():
            batch.create_check_constraint(op.f(name), check)


def downgrade() -> None:
    with op.batch_alter_table("labels", copy_from=_labels_0005()) as batch:
        for name in _CHECKS:
            batch.drop_constraint(op.f(name), type_="check")
        batch.create_check_constraint(op.f(_OLD_WEIGHT_CHECK), "weight > 0")
    # Back where 0004 kept them (each held to its checks then), under new ids: a later label
    # may have taken a set-aside row's id. One stored again since (the same job and question)
    # is kept instead.
    columns = _COLUMNS.removeprefix("id, ")
    op.execute(
        f"INSERT INTO labels ({columns}) SELECT {columns} FROM labels_set_aside s "
        "WHERE NOT EXISTS (SELECT 1 FROM labels l "
        "WHERE l.job_id = s.job_id AND l.question_id = s.question_id)"
    )
    op.drop_table("labels_set_aside")


def _labels_0005() -> sa.Table:
    table = _labels_0004()
    old = next(c for c in table.constraints if c.name == _OLD_WEIGHT_CHECK)
    table.constraints.discard(old)
    for name, check in _CHECKS.items():
        table.append_constraint(sa.CheckConstraint(check, name=name))
    return table
