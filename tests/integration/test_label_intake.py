"""The label stream into the ledger (``worker.calibration.intake``) on a real Redis, SQLite
and PostgreSQL: one bad entry, whether it cannot be read or the ledger refuses its labels,
is dropped and reported and the others are stored; an outage leaves every entry pending."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from shared import keys
from tests.support.services import postgres_schema, redis_database
from worker.calibration import store_label_stream
from worker.ledger import Ledger
from worker.ledger.errors import LedgerUnavailable

pytestmark = pytest.mark.integration

REDIS_DB = 12  # as tests/integration/test_calibration_loop.py's crash test
RESOLVED_AT_MS = "1700000000000"
SECRET = "reviewer-notes-canary"  # in every bad label: never in a log line


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    if request.param == "sqlite":
        with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as db:
            db.migrate()
            yield db
        return
    with postgres_schema("intake") as url, Ledger(url) as db:
        db.migrate()
        yield db


def label(job_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "job_id": job_id, "question_id": "urgent", "question_type": "noul",
        "machine_answer": True, "human_answer": SECRET, "correct": False,
        "reviewer": "ann", "source": "escalation", "reason": "low_confidence", **changes,
    }


def add(r: redis.Redis, job_id: str, **fields: str) -> str:
    entry = {
        "job_id": job_id, "entry_id": "1-0", "resolved_at_ms": RESOLVED_AT_MS,
        "labels": json.dumps([label(job_id)]), **fields,
    }
    return r.xadd(keys.LABEL_STREAM, entry).decode()  # type: ignore[arg-type,union-attr]


def stored_jobs(ledger: Ledger) -> list[str]:
    return sorted(row.job_id for row in ledger.labels())


def pending(r: redis.Redis) -> int:
    return int(r.xpending(keys.LABEL_STREAM, keys.LABEL_GROUP)["pending"])


def assert_reported(logs: list[dict[str, Any]], event: str, entry: str) -> None:
    found = [e for e in logs if e["event"] == event]
    assert [e["entry"] for e in found] == [entry], logs
    assert SECRET not in repr(logs)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"resolved_at_ms": "9" * 400}, id="time-past-float"),  # OverflowError
        pytest.param({"resolved_at_ms": "9" * 20}, id="time-past-year-9999"),  # OSError
        pytest.param({"labels": "[" * 100_000 + "]" * 100_000}, id="nested-past-parser"),
    ],
)
def test_an_entry_that_cannot_be_read_is_dropped_and_the_others_stored(
    r: redis.Redis, tmp_path: Path, bad: dict[str, str]
) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        add(r, "good-1")
        entry = add(r, "bad", **bad)
        add(r, "good-2")
        with capture_logs() as logs:
            assert store_label_stream(ledger, r, consumer="w1") == 2
        assert stored_jobs(ledger) == ["good-1", "good-2"]
    assert_reported(logs, "labels.skipped", entry)
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (0, 0)


#: Labels out of their bounds (``shared.labels.Label``), as a producer's JSON carries them
#: (``NaN`` and ``Infinity`` parse): refused where the label is read, never stored. Before,
#: an infinite weight or a probability of 1.5 was stored on both databases, and a NaN on
#: PostgreSQL, whose ``weight > 0`` lets NaN through.
OUT_OF_BOUNDS = {
    "weight-nan": {"weight": float("nan")},
    "weight-inf": {"weight": float("inf")},
    "weight-subnormal": {"weight": 5e-324},
    "weight-huge": {"weight": 1e12},
    "weight-zero": {"weight": 0.0},
    "weight-negative": {"weight": -1.0},
    "probability-nan": {"probability": float("nan")},
    "probability-above-one": {"probability": 1.5},
    "confidence-negative-inf": {"confidence": float("-inf")},
}


@pytest.mark.parametrize("damage", list(OUT_OF_BOUNDS.values()), ids=list(OUT_OF_BOUNDS))
def test_an_entry_with_a_label_out_of_bounds_is_skipped_naming_the_field_and_the_rest_stored(
    r: redis.Redis, ledger: Ledger, damage: dict[str, float]
) -> None:
    add(r, "good-1")
    # Its neighbour in the entry is fine: the entry (one resolution) is skipped whole.
    entry = add(r, "bad", labels=json.dumps([label("bad-0"), label("bad", **damage)]))
    add(r, "good-2")
    with capture_logs() as logs:
        assert store_label_stream(ledger, r, consumer="w1", page=2) == 2
    assert stored_jobs(ledger) == ["good-1", "good-2"]
    assert_reported(logs, "labels.skipped", entry)
    (skipped,) = [e for e in logs if e["event"] == "labels.skipped"]
    assert (skipped["why"], skipped["fields"]) == ("ValidationError", list(damage)), skipped
    assert not [e for e in logs if e["event"] == "labels.dropped"], logs
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (0, 0)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(label("bad", reviewer="a\u0000b"), id="nul-in-text"),  # PostgreSQL refuses
        pytest.param(label("bad", reviewer="\ud800"), id="lone-surrogate"),  # no UTF-8 for it
    ],
)
def test_an_entry_the_ledger_refuses_is_dropped_and_the_others_stored(
    r: redis.Redis, ledger: Ledger, bad: dict[str, Any]
) -> None:
    add(r, "good-1")
    entry = add(r, "bad", labels=json.dumps([bad]))
    add(r, "good-2")
    with capture_logs() as logs:
        stored = store_label_stream(ledger, r, consumer="w1")
    refused = "bad" not in stored_jobs(ledger)
    assert stored == (2 if refused else 3)
    assert {"good-1", "good-2"} <= set(stored_jobs(ledger))
    if refused:  # by the ledger, or before it (a label's name must be text UTF-8 can carry)
        said = {e["event"] for e in logs if e.get("entry") == entry}
        assert said & {"labels.dropped", "labels.skipped"}, logs
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (0, 0)


def test_an_outage_while_storing_one_at_a_time_leaves_every_entry_pending(
    r: redis.Redis, tmp_path: Path
) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        ledger.migrate()
        add(r, "good-1")
        # A label the SQLite driver cannot encode (a lone surrogate in its answer): the
        # ledger refuses it.
        add(r, "bad", labels=json.dumps([label("bad", human_answer="\ud800")]))
        add(r, "good-2")
        original = ledger.store_labels
        calls: list[int] = []

        def down_after_the_batch(found, resolved=()):  # type: ignore[no-untyped-def]
            calls.append(len(found))
            if len(calls) == 1:
                return original(found, resolved)  # the batch: refused for the bad entry's row
            raise LedgerUnavailable("ledger unavailable at sqlite: gone")

        ledger.store_labels = down_after_the_batch  # type: ignore[method-assign]
        with pytest.raises(LedgerUnavailable):
            store_label_stream(ledger, r, consumer="w1")
        assert calls == [3, 1]
        assert pending(r) == 3  # nothing acknowledged: the next round stores them
        ledger.store_labels = original  # type: ignore[method-assign]
        assert store_label_stream(ledger, r, consumer="w1") == 2
        assert stored_jobs(ledger) == ["good-1", "good-2"]
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (0, 0)


def test_an_unreachable_ledger_leaves_every_entry_pending(r: redis.Redis) -> None:
    add(r, "good-1")
    add(r, "good-2")
    unreachable = Ledger("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1")
    with unreachable as ledger, pytest.raises(LedgerUnavailable):
        store_label_stream(ledger, r, consumer="w1")
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (2, 2)


@pytest.mark.parametrize("field", ["model", "question_id", "provider", "batch"])
def test_a_label_too_long_to_index_is_skipped_and_the_resolution_kept(
    r: redis.Redis, ledger: Ledger, field: str
) -> None:
    """Found by an attack: one entry whose label named a 16,000-character model made
    PostgreSQL refuse the page ("index row requires 16024 bytes"), as an OperationalError,
    read as an outage: every entry after it stayed pending for good. A label's names are
    ids (at most 200 characters); a longer one is skipped as out of bounds, and the
    resolution it came with is still stored."""
    add(r, "good-1")
    entry = add(r, "long", labels=json.dumps([label("long", **{field: "m" * 16_000})]))
    add(r, "good-2")
    with capture_logs() as logs:
        assert store_label_stream(ledger, r, consumer="w1") == 2
    assert stored_jobs(ledger) == ["good-1", "good-2"]
    assert_reported(logs, "labels.skipped", entry)
    assert ledger.resolved("long") and ledger.resolved("good-1")
    assert (pending(r), r.xlen(keys.LABEL_STREAM)) == (0, 0)
