"""A claim's reach (revision 0007): how far past its holder's last write its lease may lie.

Every write of a claim's lease keeps it: a claim (alone, with its job, many jobs at once, a
pack's members, the re-claim of a ``not_sent`` call) and a renewal. A delivery that meets
the claim judges the lease by it (``worker.delivery.calls``, tests/unit/
test_claims_across_fleets.py); a reach missing on any path would have that call judged by
the reader's own settings again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from worker.ledger import CallOutcome, CallRow, Claim, JobRow, Ledger, MemberClaim, schema
from worker.ledger.job_ops import open_and_claim_many

#: Seconds a reach may differ from the lease's distance from the test's clock: the claim's
#: own time is the ledger's clock (the database's, carried forward), read a little later.
TOLERANCE_S = 2.0


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def reach_of(ledger: Ledger, job_id: str) -> float | None:
    call = ledger.get_call(job_id, "decide")
    assert call is not None
    return call.lease_reach_s


def assert_reach(reach: float | None, seconds: float) -> None:
    assert reach is not None and abs(reach - seconds) <= TOLERANCE_S, reach


def test_a_claim_keeps_its_leases_distance_as_its_reach(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    job = new_job()
    claimed = claim(job.job_id, lease_expires=later(150))
    assert_reach(claimed.call.lease_reach_s, 150)
    assert_reach(reach_of(ledger, job.job_id), 150)


def test_a_reclaim_keeps_its_own_reach(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    job = new_job()
    claim(job.job_id, lease_expires=later(600))
    ledger.record(job_id=job.job_id, outcome=CallOutcome(step="decide", status="not_sent"))
    again = claim(job.job_id, lease_expires=later(40))
    assert again.fresh and again.call.claims == 2
    assert_reach(again.call.lease_reach_s, 40)


def job_fields(job_id: str) -> dict[str, object]:
    return {
        "job_id": job_id, "kind": "decide", "batch": None, "reply_to": "r",
        "fingerprint": "fp", "deadline": later(60), "job_json": "{}",
    }  # fmt: skip


def claim_fields(lease_s: float) -> dict[str, object]:
    return {
        "step": "decide", "provider": "faux", "model": None, "request_sha256": "x",
        "lease_expires": later(lease_s),
    }  # fmt: skip


def test_a_job_opened_and_claimed_keeps_its_reach(ledger: Ledger) -> None:
    _, claimed = ledger.open_and_claim(job=job_fields("opened"), claim=claim_fields(90))
    assert isinstance(claimed, Claim) and claimed.fresh
    assert_reach(claimed.call.lease_reach_s, 90)


def test_jobs_opened_and_claimed_at_once_keep_their_reach(ledger: Ledger) -> None:
    # The group commit's path (worker.ledger.batch): one INSERT for every job's first call.
    writes = [
        {"job": job_fields(f"many-{i}"), "claim": claim_fields(60 + 30 * i)} for i in range(3)
    ]
    with ledger.transaction() as conn:
        open_and_claim_many(conn, writes=writes, now=ledger.now())
    for i in range(3):
        assert_reach(reach_of(ledger, f"many-{i}"), 60 + 30 * i)


def test_each_member_of_a_pack_keeps_its_own_reach(
    ledger: Ledger, new_job: Callable[..., JobRow]
) -> None:
    ids = [new_job().job_id for _ in range(2)]
    packed = ledger.claim_pack(
        members=[MemberClaim(ids[0], later(100)), MemberClaim(ids[1], later(300))],
        step="decide", provider="faux", model="faux-1", request_sha256="sha", pack_id="p",
    )  # fmt: skip
    assert packed.fresh
    assert_reach(reach_of(ledger, ids[0]), 100)
    assert_reach(reach_of(ledger, ids[1]), 300)


def test_a_renewal_raises_the_reach_to_its_step_never_lower(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    near, far = new_job().job_id, new_job().job_id
    claim(near, lease_expires=later(2))
    claim(far, lease_expires=later(600))

    assert ledger.renew_lease(job_id=near, step="decide", extend_s=45.0)
    assert ledger.renew_lease(job_id=far, step="decide", extend_s=45.0)

    assert reach_of(ledger, near) == 45.0
    assert_reach(reach_of(ledger, far), 600)  # its claim's lease still lies further


def test_a_renewal_of_a_claim_written_before_the_reach_keeps_none(
    ledger: Ledger, new_job: Callable[..., JobRow], claim: Callable[..., Claim]
) -> None:
    # How far that claim put its lease is not known: a reach of one step would have a lease
    # still at its claim's distance judged as one no worker was given.
    job = new_job()
    claim(job.job_id, lease_expires=later(600))
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE calls SET lease_reach_s = NULL"))
    assert ledger.renew_lease(job_id=job.job_id, step="decide", extend_s=45.0)
    assert reach_of(ledger, job.job_id) is None


def test_calls_claimed_before_0007_have_no_reach(empty_ledger: Ledger) -> None:
    ledger = empty_ledger
    with ledger.transaction() as conn:
        schema.migrate(conn, "0006")
        conn.execute(sa.text(
            "INSERT INTO jobs (job_id, kind, reply_to, fingerprint, deadline, job_json, "
            "created_at) VALUES ('old', 'decide', 'r', 'fp', '2026-12-01 10:00:00', '{}', "
            "'2026-12-01 09:00:00')"
        ))  # fmt: skip
        conn.execute(sa.text(
            "INSERT INTO calls (job_id, step, provider, status, lease_expires, claimed_at) "
            "VALUES ('old', 'decide', 'faux', 'claimed', '2026-12-01 10:00:00', "
            "'2026-12-01 09:00:00')"
        ))  # fmt: skip
    ledger.migrate()
    old = ledger.get_call("old", "decide")
    assert isinstance(old, CallRow) and old.status == "claimed" and old.lease_reach_s is None


def test_a_downgrade_drops_the_reach_and_keeps_the_calls_checks(empty_ledger: Ledger) -> None:
    ledger = empty_ledger
    ledger.migrate()
    ledger.open_and_claim(job=job_fields("j"), claim=claim_fields(90))
    with ledger.transaction() as conn:
        command.downgrade(schema.alembic_config(conn), "0006")
    assert ledger.current_revision() == "0006"
    columns = {c["name"] for c in sa.inspect(ledger.engine).get_columns("calls")}
    assert "lease_reach_s" not in columns and "budget_scopes" in columns
    with pytest.raises(sa.exc.IntegrityError), ledger.engine.begin() as conn:
        conn.execute(sa.text("UPDATE calls SET status = 'lost'"))  # the status check stands
    ledger.migrate()
    kept = ledger.get_call("j", "decide")
    assert kept is not None and kept.status == "claimed" and kept.lease_reach_s is None
