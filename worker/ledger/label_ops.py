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
from worker.ledger.models import labels

__all__ = ["LabelFilter", "LabelRow", "read_labels", "store_labels"]


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
    dialect = conn.dialect.name
    insert: Any
    if dialect == "postgresql":
        insert = postgresql.insert(labels).on_conflict_do_nothing(
            index_elements=["job_id", "question_id"]
        )
    elif dialect == "sqlite":
        insert = sqlite.insert(labels).on_conflict_do_nothing(
            index_elements=["job_id", "question_id"]
        )
    else:  # pragma: no cover - the ledger runs on SQLite or PostgreSQL only
        raise NotImplementedError(dialect)
    result = conn.execute(insert.returning(labels.c.id), rows)
    return len(result.all())


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
