"""The ledger's labels in bounds (revision 0005), on SQLite and PostgreSQL: a row whose
probability or confidence is not in [0, 1], or whose weight is not in [MIN_WEIGHT,
MAX_WEIGHT], NaN and the infinities included, is refused; rows already out of bounds when the
ledger migrates are set aside in ``labels_set_aside``, whole, and come back on a downgrade."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from shared.calibration import MAX_WEIGHT, MIN_WEIGHT
from shared.labels import Label
from worker.calibration import group_reports
from worker.ledger import Ledger, schema

NAN, INF = float("nan"), float("inf")

#: Out of bounds on both databases.
OUT_OF_BOUNDS: dict[str, dict[str, float]] = {
    "weight-inf": {"weight": INF},
    "weight-negative-inf": {"weight": -INF},
    "weight-huge": {"weight": MAX_WEIGHT * 2},
    "weight-subnormal": {"weight": 5e-324},
    "weight-zero": {"weight": 0.0},
    "probability-inf": {"probability": INF},
    "probability-above-one": {"probability": 1.5},
    "probability-negative": {"probability": -0.1},
    "confidence-negative-inf": {"confidence": -INF},
    "confidence-above-one": {"confidence": 5.0},
}
#: PostgreSQL stores NaN (and 0004 let it through); SQLite has none: its driver binds NaN as
#: NULL, which a weight (NOT NULL) refuses and a probability or confidence reads as absent.
NAN_CASES: dict[str, dict[str, float]] = {
    "weight-nan": {"weight": NAN},
    "probability-nan": {"probability": NAN},
    "confidence-nan": {"confidence": NAN},
}


def insert_label(ledger: Ledger, job_id: str, **columns: Any) -> None:
    """A label row written by hand, as no ``Label`` would be."""
    values: dict[str, Any] = {
        "job_id": job_id, "question_id": "q", "batch": "cb", "question_type": "noul",
        "provider": "faux", "model": "faux-1", "machine_answer": "true", "probability": 0.9,
        "confidence": 0.8, "human_answer": "true", "correct": True, "reviewer": "r",
        "resolved_at": datetime.now(UTC), "source": "audit", "reason": "audit",
        "weight": 1.0, "stored_at": datetime.now(UTC),
    }  # fmt: skip
    values.update(columns)
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    with ledger.engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO labels ({names}) VALUES ({marks})"), values)


def is_postgres(ledger: Ledger) -> bool:
    return ledger.dialect == "postgresql"


@pytest.mark.parametrize("damage", list(OUT_OF_BOUNDS.values()), ids=list(OUT_OF_BOUNDS))
def test_the_ledger_refuses_a_label_out_of_bounds(ledger: Ledger, damage: dict[str, float]) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        insert_label(ledger, "bad", **damage)
    assert ledger.labels() == []


@pytest.mark.parametrize("damage", list(NAN_CASES.values()), ids=list(NAN_CASES))
def test_the_ledger_holds_no_nan(ledger: Ledger, damage: dict[str, float]) -> None:
    if is_postgres(ledger) or "weight" in damage:
        with pytest.raises(sa.exc.IntegrityError):
            insert_label(ledger, "bad", **damage)
        assert ledger.labels() == []
        return
    insert_label(ledger, "bad", **damage)
    (row,) = ledger.labels()
    (field,) = damage
    assert getattr(row, field) is None


def label(job_id: str, **changes: Any) -> tuple[Label, datetime, None]:
    fields: dict[str, Any] = {
        "job_id": job_id, "question_id": "q", "question_type": "noul", "provider": "faux",
        "model": "faux-1", "machine_answer": True, "probability": 0.9, "confidence": 0.8,
        "human_answer": True, "correct": True, "reviewer": "r", "source": "audit",
        "reason": "audit",
    }  # fmt: skip
    return Label(**(fields | changes)), datetime.now(UTC), None


def test_a_label_at_its_bounds_is_stored_as_it_is(ledger: Ledger) -> None:
    # The Label's bounds and the ledger's checks are the same numbers: what a Label takes,
    # the ledger stores, to the last bit.
    edges = [
        label("lightest", weight=MIN_WEIGHT, probability=0.0, confidence=0.0),
        label("heaviest", weight=MAX_WEIGHT, probability=1.0, confidence=1.0),
        label("none", probability=None, confidence=None),
    ]
    assert ledger.store_labels(edges) == 3
    got = {row.job_id: (row.weight, row.probability, row.confidence) for row in ledger.labels()}
    assert got == {
        "lightest": (MIN_WEIGHT, 0.0, 0.0),
        "heaviest": (MAX_WEIGHT, 1.0, 1.0),
        "none": (1.0, None, None),
    }


def set_aside(ledger: Ledger) -> dict[str, tuple[Any, ...]]:
    with ledger.engine.connect() as conn:
        columns = "job_id, probability, confidence, weight, reviewer, set_aside_at"
        rows = conn.execute(sa.text(f"SELECT {columns} FROM labels_set_aside")).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def same(a: Any, b: Any) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or (
        a == b
    )


def test_migrating_sets_aside_the_rows_out_of_bounds_and_keeps_the_rest(
    empty_ledger: Ledger,
) -> None:
    ledger = empty_ledger
    with ledger.transaction() as conn:
        schema.migrate(conn, "0004")
    bad = OUT_OF_BOUNDS | (NAN_CASES if is_postgres(ledger) else {})
    # What 0004 let in: its CHECK (weight > 0) refused the others (and let NaN through).
    let_in = {n: d for n, d in bad.items() if n not in ("weight-zero", "weight-negative-inf")}
    for name, damage in let_in.items():
        insert_label(ledger, name, reviewer=f"reviewer of {name}", **damage)
    for i in range(3):
        insert_label(ledger, f"good-{i}", probability=i / 2, weight=1.0 + i)
    before = group_reports(ledger.labels())

    ledger.migrate()

    ledger.check_schema()
    assert ledger.current_revision() == ledger.head_revision()
    assert sorted(row.job_id for row in ledger.labels()) == ["good-0", "good-1", "good-2"]
    aside = set_aside(ledger)
    assert set(aside) == set(let_in)
    for name, damage in let_in.items():
        probability, confidence, weight, reviewer, at = aside[name]
        kept = {"probability": probability, "confidence": confidence, "weight": weight}
        assert all(same(kept[field], value) for field, value in damage.items()), (name, kept)
        assert reviewer == f"reviewer of {name}" and at is not None
    # Every row set aside was left out of every figure already (but a weight below
    # MIN_WEIGHT, which the figures now leave out too): no figure moves.
    assert group_reports(ledger.labels()) == [
        replace_left_out(group, 0) for group in before
    ]
    for name, damage in let_in.items():
        with pytest.raises(sa.exc.IntegrityError):
            insert_label(ledger, f"again-{name}", **damage)


def replace_left_out(group: Any, left_out: int) -> Any:
    return replace(group, report=replace(group.report, left_out=left_out))


def test_the_rebuilt_table_keeps_its_other_checks_and_indexes(ledger: Ledger) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        insert_label(ledger, "x", source="rumour")
    insert_label(ledger, "x")
    with pytest.raises(sa.exc.IntegrityError):
        insert_label(ledger, "x")  # one label per job and question
    indexes = {ix["name"] for ix in sa.inspect(ledger.engine).get_indexes("labels")}
    assert {"ix_labels_batch", "ix_labels_resolved_at", "ix_labels_question"} <= indexes


def test_a_downgrade_puts_the_rows_set_aside_back(empty_ledger: Ledger) -> None:
    ledger = empty_ledger
    with ledger.transaction() as conn:
        schema.migrate(conn, "0004")
    insert_label(ledger, "inf", weight=INF)
    insert_label(ledger, "taken", probability=1.5)
    insert_label(ledger, "good")
    ledger.migrate()
    assert set(set_aside(ledger)) == {"inf", "taken"}
    insert_label(ledger, "taken", probability=0.5)  # mended by hand, and put back
    with ledger.transaction() as conn:
        command.downgrade(schema.alembic_config(conn), "0004")
    assert ledger.current_revision() == "0004"
    assert "labels_set_aside" not in sa.inspect(ledger.engine).get_table_names()
    rows = {(row.job_id, row.question_id): row for row in ledger.labels()}
    assert set(rows) == {("inf", "q"), ("taken", "q"), ("good", "q")}
    # The row stored since is kept, not the one set aside for the same job and question.
    assert rows[("inf", "q")].weight == INF and rows[("taken", "q")].probability == 0.5
    with pytest.raises(sa.exc.IntegrityError):  # 0004's own check is back
        insert_label(ledger, "zero", weight=0.0)
    ledger.migrate()  # and up again: set aside again
    assert set(set_aside(ledger)) == {"inf"}
