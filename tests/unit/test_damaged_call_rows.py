"""A redelivery that finds a call's stored columns damaged still ends its job, sending nothing.

A row the protocol wrote is always readable, but a ledger is also written by hand (a repair,
a restore from an older schema, a disk): a stored outcome or receipt that cannot be read, a
lease or deadline no worker could have set. None of those may crash the redelivery (the job
would get no terminal message, and its message would be redelivered for ever) or make it
wait for ever; and none may make it send the call again (at most once). A call whose outcome
cannot be read is what a call whose outcome is unknown is: escalated for a person.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.replies import EscalationMessage, parse_reply
from shared.settings import Settings
from worker.delivery import Delivery, stored_answers, stored_receipt
from worker.delivery.sinks import MemorySink
from worker.kinds.decide import DECIDE_STEP
from worker.kinds.dispatch import Runner
from worker.ledger import CallOutcome, CallRow, Ledger
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

#: What a damaged ``outcome_json`` of an answered decide call was seen to hold.
DAMAGED_OUTCOMES = {
    "not-json": "not json{",
    "a-list": "[]",
    "a-string": '"x"',
    "null": "null",
    "not-an-answer": '{"q": 5}',
    "deep": "[" * 100_000 + "]" * 100_000,
    "deep-in-an-answer": '{"q":' + "[" * 100_000 + "]" * 100_000 + "}",
}
#: A far date a hand-edited row may hold (the largest a column takes).
FAR = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)


class Env:
    """A ledger, the faux provider in process and a runner on them."""

    def __init__(self, url: str, **over: Any) -> None:
        self.settings = Settings(_env_file=None, ledger_url=url, faux_url=None, **over)
        self.ledger = Ledger.from_settings(self.settings)
        self.ledger.migrate()
        self.faux = FauxProvider()
        self.sink = MemorySink()

    def runner(self) -> Runner:
        providers = ProviderRegistry.from_settings(
            self.settings, faux_transport=self.faux.transport()
        )
        return Runner(settings=self.settings, ledger=self.ledger, providers=providers,
                      sink=self.sink)  # fmt: skip

    def run(self, raw: dict[str, Any], within_s: float = 30.0) -> str:
        self.sink = MemorySink()  # each delivery's own: what it published

        async def bounded() -> str:
            return await asyncio.wait_for(self.runner().run_one(raw), within_s)

        return asyncio.run(bounded())

    def sql(self, statement: str, **values: Any) -> None:
        with self.ledger.engine.begin() as conn:
            conn.execute(sa.text(statement), values)

    def unfinish(self, job_id: str) -> None:
        """The job as a delivery that died after the call's record left it: not finished."""
        self.sql(
            "UPDATE jobs SET terminal_type = NULL, terminal_reason = NULL, "
            "terminal_message = NULL, finished_at = NULL, published_at = NULL "
            "WHERE job_id = :j",
            j=job_id,
        )

    def last(self) -> EscalationMessage:
        reply = parse_reply(self.sink.snapshot()[-1].message)
        assert isinstance(reply, EscalationMessage), reply
        return reply

    def close(self) -> None:
        self.ledger.dispose()



def decide_job(job_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "reply_to": "r",
        "state": "A customer writes: where is my parcel?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        **fields,
    }


def _row(**fields: Any) -> CallRow:
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "job_id": "j", "step": DECIDE_STEP, "provider": "faux", "model": "faux-1",
        "request_sha256": "x", "status": "answered", "lease_expires": now, "claims": 1,
        "claimed_at": now, "finished_at": now, "cost_usd": 0.001, "cost_basis": "reported",
        "error_code": None, "receipt_json": None, "outcome_json": None,
    }  # fmt: skip
    values.update(fields)
    return CallRow(**values)


# --- reading a stored call -----------------------------------------------------------------


@pytest.mark.parametrize("damaged", DAMAGED_OUTCOMES.values(), ids=DAMAGED_OUTCOMES.keys())
def test_a_stored_outcome_that_cannot_be_read_has_no_answers(damaged: str) -> None:
    assert stored_answers(_row(outcome_json=damaged)) is None


@pytest.mark.parametrize(
    "receipt_json",
    ['{"step": 1}', "not json{", "[]", "null", '{"step": "decide"}', "[" * 100_000],
    ids=["bad-field", "not-json", "a-list", "null", "incomplete", "deep"],
)
def test_a_stored_receipt_that_cannot_be_read_is_the_calls_own_columns(
    receipt_json: str,
) -> None:
    receipt = stored_receipt(_row(status="unknown", receipt_json=receipt_json))
    assert (receipt.step, receipt.provider, receipt.status) == (DECIDE_STEP, "faux", "unknown")
    assert (receipt.cost_usd, receipt.cost_basis) == (0.001, "reported")
    assert receipt.replayed


# --- a redelivery on a damaged row ---------------------------------------------------------


@pytest.mark.parametrize("damaged", DAMAGED_OUTCOMES.values(), ids=DAMAGED_OUTCOMES.keys())
def test_a_redelivery_escalates_an_answer_it_cannot_read_and_sends_nothing(
    tmp_path: Path, damaged: str
) -> None:
    env = Env(f"sqlite:///{tmp_path / 'ledger.db'}")
    assert env.run(decide_job("a")) == "result"
    env.unfinish("a")
    env.sql("UPDATE calls SET outcome_json = :v", v=damaged)

    assert env.run(decide_job("a")) == "escalation"

    assert env.faux.total() == 1  # the first delivery's, never again
    message = env.last()
    assert message.reason == "decision_interrupted"
    assert [r.step for r in message.receipts] == [DECIDE_STEP]
    row = env.ledger.get_job("a")
    assert row is not None and row.terminal_reason == "decision_interrupted"
    # The next delivery replays that message: still nothing sent.
    assert env.run(decide_job("a")) == "escalation"
    assert env.faux.total() == 1
    env.close()


def test_a_redelivery_escalates_an_unknown_call_whose_receipt_cannot_be_read(
    ledger_url: str,
) -> None:
    env = Env(ledger_url)
    assert env.run(decide_job("b")) == "result"
    env.unfinish("b")
    env.sql("UPDATE calls SET status = 'unknown', receipt_json = :v", v='{"step": 1}')

    assert env.run(decide_job("b")) == "escalation"

    assert env.faux.total() == 1
    message = env.last()
    assert message.reason == "decision_interrupted"
    assert message.receipts[0].status == "unknown" and message.receipts[0].replayed
    env.close()


def test_a_sift_redelivery_reports_the_items_of_an_unreadable_request_interrupted(
    ledger_url: str,
) -> None:
    env = Env(ledger_url)
    job = {
        "id": "s", "kind": "sift", "reply_to": "r", "items": ["one", "two", "three"],
        "question": {"instructions": "Is this message spam?"}, "state": "A shop's mailbox.",
    }  # fmt: skip
    env.run(job)
    sent = env.faux.total()
    env.unfinish("s")
    env.sql("UPDATE calls SET outcome_json = 'null' WHERE step = 'sift.0'")

    assert env.run(job) == "escalation"

    assert env.faux.total() == sent
    message = env.last()
    assert message.reason == "decision_interrupted"
    assert message.items is not None and all(i.status == "interrupted" for i in message.items)
    env.close()


# --- a lease or a deadline no worker could have set -----------------------------------------


def _opened_and_claimed(env: Env, job_id: str, *, deadline: datetime, lease: datetime) -> None:
    """A delivery opened the job and claimed its call, then went quiet."""
    job = parse_job(decide_job(job_id))
    env.ledger.open_and_claim(
        job={
            "job_id": job_id, "kind": "decide", "batch": None, "reply_to": "r",
            "fingerprint": job_fingerprint(job), "deadline": datetime.now(UTC) + timedelta(1),
            "job_json": job.model_dump_json(),
        },
        claim={
            "step": DECIDE_STEP, "provider": "faux", "model": "faux-1", "request_sha256": "x",
            "lease_expires": datetime.now(UTC) + timedelta(1),
        },
    )  # fmt: skip
    # Written by hand, as a damaged row would hold them (the ledger refuses none of them).
    env.sql(
        "UPDATE jobs SET deadline = :d WHERE job_id = :j", d=deadline.replace(tzinfo=None), j=job_id
    )
    env.sql(
        "UPDATE calls SET lease_expires = :l WHERE job_id = :j", l=lease.replace(tzinfo=None),
        j=job_id,
    )  # fmt: skip


def test_a_lease_no_worker_could_hold_is_waited_for_only_until_the_jobs_deadline(
    ledger_url: str,
) -> None:
    env = Env(ledger_url, lease_margin_s=1.0)
    _opened_and_claimed(env, "far", deadline=datetime.now(UTC) + timedelta(seconds=1), lease=FAR)

    assert env.run(decide_job("far"), within_s=20) == "escalation"

    assert env.faux.total() == 0
    assert env.last().reason == "decision_interrupted"
    call = env.ledger.get_call("far", DECIDE_STEP)
    assert call is not None and call.status == "unknown"
    env.close()


def test_a_deadline_no_job_could_have_gets_a_bounded_lease(ledger_url: str) -> None:
    env = Env(ledger_url, deadline_ceiling_s=60.0, default_timeout_s=30.0, lease_margin_s=5.0)
    _opened_and_claimed(env, "d", deadline=FAR, lease=FAR)
    env.sql("DELETE FROM calls WHERE job_id = 'd'")  # nothing was claimed yet

    assert env.run(decide_job("d")) == "result"

    assert env.faux.total() == 1
    call = env.ledger.get_call("d", DECIDE_STEP)
    assert call is not None and (call.status, call.error_code) == ("answered", None)
    assert call.lease_expires <= datetime.now(UTC) + timedelta(seconds=65 + 5)
    env.close()


def test_a_claim_under_a_far_lease_and_a_far_deadline_is_still_waited_for_boundedly(
    ledger_url: str,
) -> None:
    env = Env(ledger_url, deadline_ceiling_s=1.0, default_timeout_s=1.0, lease_margin_s=1.0)
    _opened_and_claimed(env, "both", deadline=FAR, lease=FAR)

    assert env.run(decide_job("both"), within_s=20) == "escalation"

    assert env.faux.total() == 0
    assert env.last().reason == "decision_interrupted"
    env.close()


def test_a_renewed_lease_past_the_deadline_is_still_waited_for(ledger_url: str) -> None:
    # A menu handler's claim is renewed while the handler runs, however long: past the job's
    # deadline too (worker.delivery.leased). A delivery that finds it waits for its outcome.
    env = Env(ledger_url, lease_margin_s=0.0)
    now = datetime.now(UTC)
    # The first lease leaves the first renewal seconds, not half of one: a fresh-clone suite
    # at load 8 took longer than that to renew, and the lease ran out under the holder.
    _opened_and_claimed(
        env, "held", deadline=now + timedelta(seconds=0.5), lease=now + timedelta(seconds=3)
    )
    delivery = Delivery(
        settings=env.settings,
        ledger=env.ledger,
        providers=ProviderRegistry.from_settings(env.settings),
        sink=env.sink,
    )

    async def holder() -> None:
        for _ in range(10):  # about 5 s: well past the deadline and the first lease
            await asyncio.sleep(0.5)
            assert await asyncio.to_thread(
                env.ledger.renew_lease, job_id="held", step=DECIDE_STEP, extend_s=5.0
            )
        outcome = CallOutcome(step=DECIDE_STEP, status="failed", error_code="server_error")
        await asyncio.to_thread(lambda: env.ledger.record(job_id="held", outcome=outcome))

    async def both() -> CallRow | Any:
        call = await asyncio.to_thread(env.ledger.get_call, "held", DECIDE_STEP)
        assert call is not None
        settled, _ = await asyncio.gather(delivery.await_claim("held", DECIDE_STEP, call), holder())
        return settled

    settled = asyncio.run(both())
    assert isinstance(settled, CallRow)
    assert (settled.status, settled.error_code) == ("failed", "server_error")
    env.close()
