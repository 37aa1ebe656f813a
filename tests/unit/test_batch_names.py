"""A job's ``batch`` names a batch one can name back: not empty nor only spaces.

Before, ``"batch": ""`` (or ``"  "``) was accepted: its jobs, receipts and any ``budget_usd``
were kept under a batch that ``decisions budget show``, ``ledger status --batch`` and every
other ``--batch`` refuse to name. Leaving ``batch`` out is how a job has none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job

ROOT = Path(__file__).resolve().parents[2]


def _ticket(**changes: object) -> dict[str, object]:
    job = json.loads((ROOT / "examples" / "tickets.jsonl").read_text().splitlines()[0])
    job.update({"reply_to": "batch-names", **changes})
    return {k: v for k, v in job.items() if v is not None}


@pytest.mark.parametrize("batch", ["", " ", "\u3000", "  \u00a0 "])
def test_a_blank_batch_is_rejected_naming_the_field(batch: str) -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job(_ticket(batch=batch))
    (problem,) = caught.value.problems
    assert problem.field == "batch"
    assert "leave batch out" in problem.message


def test_a_blank_batch_with_a_budget_is_rejected_too() -> None:
    with pytest.raises(JobInvalid) as caught:
        parse_job(_ticket(batch="", budget_usd=1.0))
    assert caught.value.problems[0].field == "batch"


@pytest.mark.parametrize("batch", ["b", " spaced name ", "support-demo", None])
def test_a_named_batch_or_none_still_parses(batch: str | None) -> None:
    job = parse_job({**_ticket(), "batch": batch} if batch is not None else _ticket(batch=None))
    assert job.batch == batch
