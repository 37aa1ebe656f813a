"""A call is never claimed for a job that stored its terminal message (issue 15, defect 8).

Delivery B read the job open; delivery A then stored the job's terminal message with the
call ``not_sent``; B's claim must not re-claim the call (it would send a paid request whose
answer is thrown away). The check is in the claim's own transaction, on both backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.settings import Settings
from tests.support.runners import faux_runner
from worker.ledger import CallOutcome, Claim, JobFinished, JobRow, Ledger
from worker.testing.faux import FauxProvider

NewJob = Callable[..., JobRow]
ClaimFn = Callable[..., Claim]


def not_sent(step: str = "decide") -> CallOutcome:
    return CallOutcome(step=step, status="not_sent", error_code="connection")


def test_a_not_sent_call_of_a_finished_job_is_not_claimed_again(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    assert claim(job.job_id).fresh
    ledger.finish_job(
        job_id=job.job_id,
        message_type="escalation",
        reason="provider_error",
        message_json='{"theirs": true}',
        outcome=not_sent(),
    )
    with pytest.raises(JobFinished) as refused:
        claim(job.job_id)
    assert refused.value.job.terminal_message == '{"theirs": true}'
    call = ledger.get_call(job.job_id, "decide")
    assert call is not None and (call.status, call.claims) == ("not_sent", 1)
    # Nor is a new step of it claimed.
    with pytest.raises(JobFinished):
        claim(job.job_id, "verify.0")
    assert [c.step for c in ledger.calls(job.job_id)] == ["decide"]


def test_a_claim_made_before_the_finish_still_gets_its_outcome_booked(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    assert claim(job.job_id, "sift.0").fresh
    ledger.finish_job(
        job_id=job.job_id,
        message_type="escalation",
        reason="deadline_exceeded",
        message_json="{}",
    )
    answered = CallOutcome(step="sift.0", status="answered", cost_usd=0.001, cost_basis="estimate")
    row = ledger.finish_job(
        job_id=job.job_id,
        message_type="result",
        reason=None,
        message_json='{"late": 1}',
        outcome=answered,
    )
    assert row.terminal_message == "{}"  # first wins
    call = ledger.get_call(job.job_id, "sift.0")
    assert call is not None and (call.status, call.cost_usd) == ("answered", 0.001)


class FinishedByAnotherDelivery(Ledger):
    """Delivery A stores the job's terminal message just after delivery B read the job."""

    def open_and_claim(self, *, job: dict[str, Any], claim: dict[str, Any]) -> Any:
        row, claimed = super().open_and_claim(job=job, claim=claim)
        if claimed is None and not row.finished:
            self.finish_job(
                job_id=row.job_id,
                message_type="escalation",
                reason="provider_error",
                message_json=THEIRS,
                outcome=None,
            )
        return row, claimed


THEIRS = (
    '{"type": "escalation", "job_id": "raced", "reason": "provider_error", "detail": "A", '
    '"receipts": [], "metadata": {}, "context": {}}'
)


def test_a_delivery_that_read_the_job_open_sends_nothing_once_it_is_finished(
    tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, ledger_url=f"sqlite:///{tmp_path / 'l.db'}", faux_url=None)
    ledger = FinishedByAnotherDelivery.from_settings(settings)
    ledger.migrate()
    faux = FauxProvider()
    raw = {
        "id": "raced",
        "reply_to": "r",
        "state": "s",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }
    job = parse_job(raw)
    # Delivery A opened the job and its call ended not_sent (a connection refused).
    Ledger.open_job(
        ledger,
        job_id="raced",
        kind="decide",
        batch=None,
        reply_to="r",
        fingerprint=job_fingerprint(job),
        deadline=ledger.now().replace(year=2099),
        job_json=job.model_dump_json(),
    )
    Ledger.claim(
        ledger,
        job_id="raced",
        step="decide",
        provider="faux",
        model=None,
        request_sha256="x",
        lease_expires=ledger.now().replace(year=2099),
    )
    ledger.record(job_id="raced", outcome=not_sent())
    runner, faux, sink = faux_runner(settings, ledger, faux)

    assert asyncio.run(runner.run_one(raw)) == "escalation"

    assert faux.total() == 0  # B sent nothing
    assert [m.message for m in sink.snapshot()] == [THEIRS]
    call = ledger.get_call("raced", "decide")
    assert call is not None and (call.status, call.claims) == ("not_sent", 1)
