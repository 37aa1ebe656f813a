"""Packed calls: claimed all or none, closed in one transaction, counted once as a request."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from worker.ledger import (
    CallOutcome,
    Claim,
    ClaimLost,
    JobRow,
    Ledger,
    MemberClaim,
    MemberFinish,
    head_revision,
    schema,
)


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _claim_pack(ledger: Ledger, job_ids: list[str], pack_id: str = "pack-1") -> object:
    return ledger.claim_pack(
        members=[MemberClaim(job_id, later(150)) for job_id in job_ids],
        step="decide",
        provider="faux",
        model="faux-1",
        request_sha256=f"sha-{pack_id}",
        pack_id=pack_id,
    )


def _answered(job_id: str, cost: float) -> MemberFinish:
    return MemberFinish(
        job_id=job_id,
        message_type="result",
        reason=None,
        message_json=f'{{"job_id": "{job_id}"}}',
        outcome=CallOutcome(
            step="decide",
            status="answered",
            outcome_json=f'{{"q-{job_id}": {{}}}}',
            cost_usd=cost,
            cost_basis="reported",
        ),
    )


def test_a_pack_claims_every_member(ledger: Ledger, new_job: Callable[..., JobRow]) -> None:
    ids = [new_job().job_id for _ in range(3)]
    claimed = _claim_pack(ledger, ids)
    assert claimed.fresh and claimed.taken == {}  # type: ignore[attr-defined]
    rows = [ledger.get_call(job_id, "decide") for job_id in ids]
    assert [(r.status, r.pack_id, r.request_sha256) for r in rows if r] == [
        ("claimed", "pack-1", "sha-pack-1")
    ] * 3


def test_one_taken_member_claims_none(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    ids = [new_job().job_id for _ in range(3)]
    assert claim(ids[1]).fresh  # another delivery sent this one alone
    claimed = _claim_pack(ledger, ids)
    assert not claimed.fresh  # type: ignore[attr-defined]
    assert list(claimed.taken) == [ids[1]]  # type: ignore[attr-defined]
    assert claimed.taken[ids[1]].pack_id is None  # type: ignore[attr-defined]
    # Rolled back: the free members were not left claimed by a request that never goes out.
    assert ledger.get_call(ids[0], "decide") is None
    assert ledger.get_call(ids[2], "decide") is None
    # ... and can be packed without the taken one.
    assert _claim_pack(ledger, [ids[0], ids[2]], "pack-2").fresh  # type: ignore[attr-defined]


def test_a_not_sent_member_is_claimed_again(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    ids = [new_job().job_id for _ in range(2)]
    assert claim(ids[0]).fresh
    ledger.record(job_id=ids[0], outcome=CallOutcome(step="decide", status="not_sent"))
    assert _claim_pack(ledger, ids).fresh  # type: ignore[attr-defined]
    row = ledger.get_call(ids[0], "decide")
    assert row is not None and (row.claims, row.pack_id) == (2, "pack-1")


def test_finish_pack_closes_every_member_at_once(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ids = [new_job(batch="b-pack").job_id for _ in range(3)]
    _claim_pack(ledger, ids)
    ended = ledger.finish_pack(members=[_answered(job_id, 0.001) for job_id in ids])
    assert [e.terminal_type for e in ended if isinstance(e, JobRow)] == ["result"] * 3
    for job_id in ids:
        call = ledger.get_call(job_id, "decide")
        assert call is not None and call.status == "answered"
        assert call.outcome_json == f'{{"q-{job_id}": {{}}}}'
    status = ledger.status("b-pack")
    # One request, three calls: the ledger counts what was sent, and bills each job its share.
    assert (status.requests_sent, status.calls_sent, status.requests_packed) == (1, 3, 1)
    assert status.cost_by_basis == {"reported": 0.003}


def test_an_expired_member_keeps_its_verdict_and_the_rest_finish(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ids = [new_job().job_id for _ in range(2)]
    _claim_pack(ledger, ids)
    # The reaper booked one member unknown while the request was in flight.
    ledger.expire_claim(job_id=ids[0], step="decide", now=later(3600))
    ended = ledger.finish_pack(members=[_answered(job_id, 0.001) for job_id in ids])
    assert isinstance(ended[0], ClaimLost) and ended[0].call.status == "unknown"
    assert isinstance(ended[1], JobRow) and ended[1].terminal_type == "result"
    lost = ledger.get_job(ids[0])
    assert lost is not None and not lost.finished


def test_a_finished_member_is_not_finished_twice(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ids = [new_job().job_id for _ in range(2)]
    _claim_pack(ledger, ids)
    first = ledger.finish_pack(members=[_answered(job_id, 0.001) for job_id in ids])
    again = ledger.finish_pack(members=[_answered(job_id, 0.5) for job_id in ids])
    assert again == first
    status = ledger.status()
    assert status.cost_by_basis == {"reported": 0.002}


def test_upgrade_from_0001_keeps_the_calls(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    try:
        with ledger.engine.begin() as conn:
            schema.migrate(conn, revision="0001")
            conn.execute(text(
                "INSERT INTO jobs (job_id, kind, reply_to, fingerprint, deadline, job_json, "
                "created_at) VALUES ('old', 'decide', 'r', 'fp', '2026-12-01 10:00:00', '{}', "
                "'2026-12-01 09:00:00')"
            ))
            conn.execute(text(
                "INSERT INTO calls (job_id, step, provider, status, lease_expires, claimed_at) "
                "VALUES ('old', 'decide', 'faux', 'answered', '2026-12-01 10:00:00', "
                "'2026-12-01 09:00:00')"
            ))
        ledger.migrate()
        assert ledger.current_revision() == head_revision()
        old = ledger.get_call("old", "decide")
        assert old is not None and old.status == "answered" and old.pack_id is None
        assert ledger.status().requests_sent == 1
    finally:
        ledger.dispose()
