"""``open_and_claim``: a new job's row and its first claim in one transaction; a job read
back, or one already late, gets no claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from worker.ledger import Ledger


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def job(job_id: str, deadline: datetime) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "kind": "decide",
        "batch": None,
        "reply_to": "replies:test",
        "fingerprint": "fp-1",
        "deadline": deadline,
        "job_json": '{"id": "x"}',
    }


def claim() -> dict[str, Any]:
    return {
        "step": "decide",
        "provider": "faux",
        "model": "faux-1",
        "request_sha256": "sha-1",
        "lease_expires": later(150),
    }


def test_a_new_job_is_opened_and_claimed_at_once(ledger: Ledger) -> None:
    row, claimed = ledger.open_and_claim(job=job("new", later(120)), claim=claim())
    assert row.job_id == "new" and not row.finished
    assert claimed is not None and claimed.fresh and claimed.call.status == "claimed"
    stored = ledger.get_call("new", "decide")
    assert stored is not None and stored.claims == 1


def test_a_redelivered_job_is_read_back_without_a_claim(ledger: Ledger) -> None:
    first, _ = ledger.open_and_claim(job=job("again", later(120)), claim=claim())
    row, claimed = ledger.open_and_claim(job=job("again", later(300)), claim=claim())
    assert claimed is None
    assert row.deadline == first.deadline  # the first delivery's deadline stands
    stored = ledger.get_call("again", "decide")
    assert stored is not None and stored.claims == 1  # not claimed a second time


def test_a_job_opened_after_its_deadline_is_not_claimed(ledger: Ledger) -> None:
    row, claimed = ledger.open_and_claim(job=job("late", later(-1)), claim=claim())
    assert claimed is None and not row.finished
    assert ledger.get_call("late", "decide") is None
