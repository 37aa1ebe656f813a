"""The call state machine: every legal transition, and every illegal one refused."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import LedgerError
from worker.ledger import (
    CallNotFound,
    CallOutcome,
    Claim,
    ClaimLost,
    JobNotFound,
    JobRow,
    Ledger,
)


def now() -> datetime:
    return datetime.now(UTC)


def later(seconds: float = 60.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


NewJob = Callable[..., JobRow]
ClaimFn = Callable[..., Claim]

OUTCOMES = ["answered", "failed", "not_sent", "unknown"]
TERMINAL = ["answered", "failed", "unknown"]


def outcome(status: str, step: str = "decide", **fields: Any) -> CallOutcome:
    values: dict[str, Any] = {
        "receipt_json": f'{{"status": "{status}"}}',
        "outcome_json": '{"answers": {}}' if status == "answered" else None,
        "cost_usd": 0.002 if status != "not_sent" else None,
        "cost_basis": "reported" if status != "not_sent" else None,
        "error_code": None if status == "answered" else "connection",
    }
    values.update(fields)
    return CallOutcome(step=step, status=status, **values)  # type: ignore[arg-type]


def test_first_claim_is_fresh_and_committed(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    lease = later(90)
    got = ledger.claim(
        job_id=job.job_id,
        step="decide",
        provider="faux",
        model="faux-1",
        request_sha256="abc",
        lease_expires=lease,
    )
    assert got.fresh
    call = got.call
    assert (call.job_id, call.step, call.status, call.claims) == (
        job.job_id,
        "decide",
        "claimed",
        1,
    )
    assert (call.provider, call.model, call.request_sha256) == ("faux", "faux-1", "abc")
    assert call.lease_expires == lease
    assert call.claimed_at.tzinfo is UTC and call.lease_expires.tzinfo is UTC
    assert call.finished_at is None and call.receipt_json is None
    # Committed: a second Ledger (another worker) sees it.
    other = Ledger(ledger.engine.url.render_as_string(hide_password=False))
    try:
        assert other.get_call(job.job_id, "decide") == call
    finally:
        other.dispose()


def test_claim_of_a_live_claim_is_not_fresh(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    first = claim(job.job_id)
    second = claim(job.job_id, provider="other", request_sha256="sha-2")
    assert not second.fresh
    assert second.call == first.call  # untouched: same provider, sha, claims, lease


def test_claim_for_a_job_never_opened(ledger: Ledger, claim: ClaimFn) -> None:
    with pytest.raises(JobNotFound, match="job nope"):
        claim("nope")
    assert isinstance(JobNotFound("x"), LedgerError)


def test_steps_are_separate_calls(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    assert claim(job.job_id, "pick.0").fresh
    assert claim(job.job_id, "pick.1").fresh
    assert claim(job.job_id, "handler").fresh
    assert [c.step for c in ledger.calls(job.job_id)] == ["pick.0", "pick.1", "handler"]


@pytest.mark.parametrize("status", OUTCOMES)
def test_record_from_claimed(ledger: Ledger, new_job: NewJob, claim: ClaimFn, status: str) -> None:
    job = new_job()
    claim(job.job_id)
    row = ledger.record(job_id=job.job_id, outcome=outcome(status))
    assert row.status == status
    assert row.finished_at is not None and row.finished_at.tzinfo is UTC
    assert row.receipt_json == f'{{"status": "{status}"}}'
    assert ledger.get_call(job.job_id, "decide") == row


@pytest.mark.parametrize("stored", ["answered", "failed", "not_sent", "unknown"])
@pytest.mark.parametrize("attempted", OUTCOMES)
def test_record_refused_unless_claimed(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, stored: str, attempted: str
) -> None:
    job = new_job()
    claim(job.job_id)
    before = ledger.record(job_id=job.job_id, outcome=outcome(stored, receipt_json="first"))
    with pytest.raises(ClaimLost) as caught:
        ledger.record(job_id=job.job_id, outcome=outcome(attempted, receipt_json="second"))
    assert caught.value.call == before
    assert job.job_id in str(caught.value) and stored in str(caught.value)
    assert ledger.get_call(job.job_id, "decide") == before


@pytest.mark.parametrize("stored", TERMINAL)
def test_terminal_calls_are_never_claimed_again(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, stored: str
) -> None:
    job = new_job()
    claim(job.job_id)
    before = ledger.record(job_id=job.job_id, outcome=outcome(stored))
    again = claim(job.job_id, request_sha256="sha-2")
    assert not again.fresh
    assert again.call == before


def test_not_sent_is_claimed_again(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    claim(job.job_id)
    ledger.record(job_id=job.job_id, outcome=outcome("not_sent", error_code="connection"))
    lease = later(200)
    again = claim(job.job_id, lease_expires=lease, provider="faux-b", request_sha256="sha-2")
    assert again.fresh
    call = again.call
    assert (call.status, call.claims, call.lease_expires) == ("claimed", 2, lease)
    assert (call.provider, call.request_sha256) == ("faux-b", "sha-2")
    # The previous attempt's outcome does not leak into the new one.
    assert call.finished_at is None and call.error_code is None and call.receipt_json is None
    # ... and only once: the re-claim is now a live claim.
    assert not claim(job.job_id).fresh
    final = ledger.record(job_id=job.job_id, outcome=outcome("answered"))
    assert (final.status, final.claims) == ("answered", 2)


def test_record_without_claim(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    with pytest.raises(CallNotFound, match="decide"):
        ledger.record(job_id=job.job_id, outcome=outcome("answered"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": "claimed"}, "a call ends as one of"),
        ({"status": "bogus"}, "a call ends as one of"),
        ({"status": "answered", "cost_basis": "guess"}, "cost_basis"),
        ({"status": "answered", "cost_usd": -1.0}, "negative"),
    ],
)
def test_record_rejects_impossible_outcomes(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, fields: dict[str, Any], message: str
) -> None:
    job = new_job()
    claim(job.job_id)
    fields = dict(fields)
    status = fields.pop("status")
    with pytest.raises(ValueError, match=message):
        ledger.record(job_id=job.job_id, outcome=outcome(str(status), **fields))
    assert ledger.get_call(job.job_id, "decide").status == "claimed"  # type: ignore[union-attr]


def test_lease_expiry_makes_unknown(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    lease = later(30)
    claim(job.job_id, lease_expires=lease)
    # Lease still running: a live duplicate's claim, left alone.
    assert ledger.expire_claim(job_id=job.job_id, step="decide").status == "claimed"
    assert ledger.expire_claim(job_id=job.job_id, step="decide", now=lease).status == "claimed"
    assert ledger.expired_claims() == []
    after = lease + timedelta(seconds=1)
    [expired] = ledger.expired_claims(now=after)
    assert expired.job_id == job.job_id
    row = ledger.expire_claim(
        job_id=job.job_id, step="decide", now=after, cost_usd=0.001, cost_basis="estimate"
    )
    assert (row.status, row.error_code, row.finished_at) == ("unknown", "lease_expired", after)
    assert (row.cost_usd, row.cost_basis) == (0.001, "estimate")
    assert ledger.expired_claims(now=after + timedelta(hours=1)) == []
    # Expiring again changes nothing.
    assert ledger.expire_claim(job_id=job.job_id, step="decide", now=after + timedelta(1)) == row


def test_record_never_overwrites_an_expired_claim(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    claim(job.job_id, lease_expires=now() - timedelta(seconds=1))
    unknown = ledger.expire_claim(job_id=job.job_id, step="decide")
    assert unknown.status == "unknown" and unknown.cost_usd is None
    # The request came back after all; too late, the unknown (maybe escalated) stands.
    with pytest.raises(ClaimLost) as caught:
        ledger.record(job_id=job.job_id, outcome=outcome("answered"))
    assert caught.value.call.status == "unknown"
    assert ledger.get_call(job.job_id, "decide") == unknown
    assert not claim(job.job_id).fresh


@pytest.mark.parametrize("stored", [*TERMINAL, "not_sent"])
def test_expire_leaves_other_states_alone(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn, stored: str
) -> None:
    job = new_job()
    claim(job.job_id, lease_expires=now() - timedelta(seconds=5))
    before = ledger.record(job_id=job.job_id, outcome=outcome(stored))
    assert ledger.expire_claim(job_id=job.job_id, step="decide") == before
    assert ledger.expired_claims() == []


def test_expire_unknown_call(ledger: Ledger, new_job: NewJob) -> None:
    job = new_job()
    with pytest.raises(CallNotFound):
        ledger.expire_claim(job_id=job.job_id, step="decide")
    with pytest.raises(ValueError, match="cost_basis"):
        ledger.expire_claim(job_id=job.job_id, step="decide", cost_basis="guess")


def test_naive_lease_is_refused(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    job = new_job()
    with pytest.raises(ValueError, match="naive"):
        claim(job.job_id, lease_expires=later(10).replace(tzinfo=None))


def _race(n: int, attempt: Callable[[], Claim]) -> list[Claim]:
    barrier = threading.Barrier(n)
    results: list[Claim] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait()
            got = attempt()
            with lock:
                results.append(got)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def test_concurrent_claims_one_fresh(ledger: Ledger, new_job: NewJob, claim: ClaimFn) -> None:
    for _ in range(5):
        job = new_job()
        results = _race(8, lambda job_id=job.job_id: claim(job_id))  # type: ignore[misc]
        assert sum(r.fresh for r in results) == 1
        assert len({r.call for r in results}) == 1  # everyone saw the same committed row


def test_concurrent_reclaims_of_not_sent_one_fresh(
    ledger: Ledger, new_job: NewJob, claim: ClaimFn
) -> None:
    job = new_job()
    claim(job.job_id)
    ledger.record(job_id=job.job_id, outcome=outcome("not_sent"))
    results = _race(8, lambda: claim(job.job_id))
    assert sum(r.fresh for r in results) == 1
    assert ledger.get_call(job.job_id, "decide").claims == 2  # type: ignore[union-attr]
