"""Figures for ``decisions status`` and the list of unknown calls."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from worker.ledger import CallOutcome, Claim, JobRow, Ledger


def now() -> datetime:
    return datetime.now(UTC)


NewJob = Callable[..., JobRow]
ClaimFn = Callable[..., Claim]


def done(
    status: str, step: str = "decide", cost: float | None = None, basis: str | None = None
) -> CallOutcome:
    return CallOutcome(step=step, status=status, cost_usd=cost, cost_basis=basis)  # type: ignore[arg-type]


@pytest.fixture
def scenario(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> Ledger:
    def finish(
        job: JobRow, kind: str, reason: str | None = None, last: CallOutcome | None = None
    ) -> None:
        ledger.finish_job(
            job_id=job.job_id, message_type=kind, reason=reason, message_json="{}", outcome=last
        )

    # batch A --------------------------------------------------------------------------
    a1 = new_job("a1", batch="A")  # result, one reported call
    claim("a1")
    finish(a1, "result", last=done("answered", cost=0.01, basis="reported"))
    ledger.mark_published("a1")

    a2 = new_job("a2", batch="A")  # low confidence after two calls, one of them unknown
    claim("a2", "pick.0")
    ledger.record(job_id="a2", outcome=done("answered", "pick.0", 0.02, "reported"))
    claim("a2", "pick.1")
    finish(a2, "escalation", "low_confidence", done("unknown", "pick.1", 0.001, "estimate"))

    a3 = new_job("a3", batch="A")  # worker died: expired to unknown at unknown cost
    claim("a3", lease_expires=now() - timedelta(seconds=1))
    ledger.expire_claim(job_id="a3", step="decide")
    finish(a3, "escalation", "decision_interrupted")

    new_job("a4", batch="A")  # still running, its call in flight
    claim("a4")

    new_job("a5", batch="A")  # a call that never left, waiting to be claimed again
    claim("a5")
    ledger.record(job_id="a5", outcome=done("not_sent"))
    claim("a5")
    ledger.record(job_id="a5", outcome=done("not_sent"))

    # batch B --------------------------------------------------------------------------
    b1 = new_job("b1", batch="B")
    claim("b1")
    finish(b1, "result", last=done("failed", cost=0.005, basis="reported"))
    new_job("b2", batch="B")
    finish(ledger.get_job("b2"), "rejected", "invalid")  # type: ignore[arg-type]
    return ledger


def test_status_of_one_batch(scenario: Ledger) -> None:
    status = scenario.status("A")
    assert status.batch == "A"
    assert (status.jobs_total, status.jobs_open, status.jobs_unpublished) == (5, 2, 2)
    assert status.jobs_by_type == {"result": 1, "escalation": 2}
    assert status.jobs_by_reason == {
        "escalation:low_confidence": 1,
        "escalation:decision_interrupted": 1,
    }
    assert status.calls_by_status == {"answered": 2, "unknown": 2, "claimed": 1, "not_sent": 1}
    assert status.requests_sent == 4
    assert status.claims_total == 7  # six calls, a5 claimed twice
    assert status.calls_by_basis == {"reported": 2, "estimate": 1, "unknown": 1}
    assert status.cost_by_basis == pytest.approx(
        {"reported": 0.03, "estimate": 0.001, "unknown": None}
    )
    assert status.cost_known_usd == pytest.approx(0.031)


def test_status_of_everything(scenario: Ledger) -> None:
    status = scenario.status()
    assert status.batch is None
    assert (status.jobs_total, status.jobs_open, status.jobs_unpublished) == (7, 2, 4)
    assert status.jobs_by_type == {"result": 2, "escalation": 2, "rejected": 1}
    assert status.jobs_by_reason["rejected:invalid"] == 1
    assert status.calls_by_status["failed"] == 1
    assert status.requests_sent == 5
    assert status.cost_by_basis["reported"] == pytest.approx(0.035)


def test_status_of_an_empty_or_unknown_batch(ledger: Ledger) -> None:
    for status in (ledger.status(), ledger.status("nope")):
        assert (status.jobs_total, status.jobs_open, status.requests_sent) == (0, 0, 0)
        assert status.jobs_by_type == {} and status.calls_by_status == {}
        assert status.cost_by_basis == {} and status.cost_known_usd == 0


def test_unknown_calls(scenario: Ledger) -> None:
    unknown = scenario.unknown_calls()
    assert [(c.job_id, c.step) for c in unknown] == [("a2", "pick.1"), ("a3", "decide")]
    assert all(c.status == "unknown" and c.finished_at is not None for c in unknown)
    assert unknown[1].error_code == "lease_expired" and unknown[1].cost_usd is None
