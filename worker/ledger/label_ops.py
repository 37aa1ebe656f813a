"""Labels in the ledger: stored once per job and question, read back by filter.

``store_labels`` inserts and skips a label already stored (same job and question): the
label stream is read at least once (``worker.calibration.intake``), so the same entry may be
stored twice after a crash, and the second time changes nothing. Both run on a connection
the caller holds in a transaction (``Ledger.transaction``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from shared.labels import Label
from worker.ledger.models import labels, resolutions

__all__ = [
    "LabelFilter",
    "LabelRow",
    "Resolved",
    "read_labels",
    "resolved",
    "store_labels",
    "store_resolutions",
]


@dataclass(frozen=True)
class LabelRow:
    job_id: str
    question_id: str
    batch: str | None
    question_type: str
    provider: str | None
    model: str | None
    machine_answer: Any
    probability: float | None
    confidence: float | None
    human_answer: Any
    correct: bool
    reviewer: str
    resolved_at: datetime
    source: str
    reason: str
    weight: float


@dataclass(frozen=True)
class LabelFilter:
    """Which labels to read; None matches all."""

    batch: str | None = None
    question: str | None = None
    #: A question id reused with another type is another question (noul, choice, ...).
    question_type: str | None = None
    provider: str | None = None
    model: str | None = None
    since: datetime | None = None
    source: str | None = None


def store_labels(
    conn: Connection,
    found: Sequence[tuple[Label, datetime, str | None]],
    *,
    now: datetime,
) -> int:
    """Insert each ``(label, resolved_at, escalation entry id)``; a label stored before is
    left as it is. Returns how many were new."""
    if not found:
        return 0
    rows = [
        {
            "job_id": label.job_id,
            "question_id": label.question_id,
            "batch": label.batch,
            "question_type": label.question_type,
            "provider": label.provider,
            "model": label.model,
            "machine_answer": json.dumps(label.machine_answer, ensure_ascii=False),
            "probability": label.probability,
            "confidence": label.confidence,
            "human_answer": json.dumps(label.human_answer, ensure_ascii=False),
            "correct": label.correct,
            "reviewer": label.reviewer,
            "resolved_at": resolved_at,
            "source": label.source,
            "reason": label.reason,
            "weight": label.weight,
            "entry_id": entry_id,
            "stored_at": now,
        }
        for label, resolved_at, entry_id in found
    ]
    insert = _insert_ignoring(conn, labels, ["job_id", "question_id"])
    result = conn.execute(insert.returning(labels.c.id), rows)
    return len(result.all())


#: One resolution as the label stream carries it: job id, reviewer, when, escalation entry id.
Resolved = tuple[str, str, datetime, str | None]


def store_resolutions(conn: Connection, found: Sequence[Resolved], *, now: datetime) -> int:
    """Insert each resolution; one stored before (the same entry read again) is left as it
    is. Returns how many were new."""
    if not found:
        return 0
    rows = [
        {"job_id": job_id, "reviewer": reviewer, "resolved_at": at, "entry_id": entry_id,
         "stored_at": now}
        for job_id, reviewer, at, entry_id in found
    ]  # fmt: skip
    insert = _insert_ignoring(conn, resolutions, ["job_id"])
    return len(conn.execute(insert.returning(resolutions.c.job_id), rows).all())


def _insert_ignoring(conn: Connection, table: sa.Table, key: list[str]) -> Any:
    """An INSERT that skips a row whose ``key`` is there already, on either dialect."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=key)
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=key)
    raise NotImplementedError(dialect)  # pragma: no cover - SQLite or PostgreSQL only


def resolved(conn: Connection, job_id: str) -> bool:
    """Whether a reviewer resolved the job: a resolution stored, or (before revision 0006,
    which stores every one) a label of it."""
    query = sa.select(
        sa.or_(
            sa.exists().where(resolutions.c.job_id == job_id),
            sa.exists().where(labels.c.job_id == job_id),
        )
    )
    return bool(conn.execute(query).scalar_one())


def read_labels(conn: Connection, where: LabelFilter | None = None) -> list[LabelRow]:
    """The labels matching ``where``, oldest resolution first."""
    query = sa.select(labels)
    where = where or LabelFilter()
    for column, value in (
        (labels.c.batch, where.batch),
        (labels.c.question_id, where.question),
        (labels.c.question_type, where.question_type),
        (labels.c.provider, where.provider),
        (labels.c.model, where.model),
        (labels.c.source, where.source),
    ):
        if value is not None:
            query = query.where(column == value)
    if where.since is not None:
        query = query.where(labels.c.resolved_at >= where.since)
    query = query.order_by(labels.c.resolved_at, labels.c.id)
    return [
        LabelRow(
            job_id=row.job_id,
            question_id=row.question_id,
            batch=row.batch,
            question_type=row.question_type,
            provider=row.provider,
            model=row.model,
            machine_answer=_json(row.machine_answer),
            probability=row.probability,
            confidence=row.confidence,
            human_answer=_json(row.human_answer),
            correct=bool(row.correct),
            reviewer=row.reviewer,
            resolved_at=row.resolved_at,
            source=row.source,
            reason=row.reason,
            weight=float(row.weight),
        )
        for row in conn.execute(query)
    ]


def _json(text: str | None) -> Any:
    """A stored answer as JSON, or its text when it cannot be read as JSON: a row written by
    hand may hold anything, nested deeper than the parser goes (``RecursionError``) too, and
    one such row must not make every read of the labels fail."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text
