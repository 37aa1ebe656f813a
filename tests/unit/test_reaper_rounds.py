"""The reaper's round on a real ledger (SQLite and PostgreSQL): one expired claim whose job
cannot be read is logged and skipped while the others are booked, nothing is ever sent; and
one failing step of a round (reap, relay, intake recovery) never skips the others."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.settings import Settings
from tests.support.runners import faux_runner
from worker.ledger import Ledger, LedgerUnavailable
from worker.ledger.models import calls, jobs
from worker.process import context
from worker.recovery import reaper
from worker.recovery.reaper import ReaperThread, reap_once

BODY_MARK = "where is my parcel"




def decide_job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "reply_to": "r",
        "state": f"A customer writes: {BODY_MARK}?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }


@contextmanager
def migrated(ledger_url: str) -> Iterator[tuple[Settings, Ledger]]:
    """Settings on ``ledger_url`` and its ledger, migrated; disposed of after."""
    settings = Settings(_env_file=None, ledger_url=ledger_url, faux_url=None)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    try:
        yield settings, ledger
    finally:
        ledger.dispose()


def claimed_and_expired(ledger: Ledger, job_id: str) -> None:
    """A job whose worker died with its call claimed: the lease has run out."""
    job = parse_job(decide_job(job_id))
    ahead = datetime.now(UTC) + timedelta(seconds=60)
    ledger.open_and_claim(
        job={
            "job_id": job_id,
            "kind": "decide",
            "batch": None,
            "reply_to": "r",
            "fingerprint": job_fingerprint(job),
            "deadline": ahead,
            "job_json": job.model_dump_json(),
        },
        claim={
            "step": "decide",
            "provider": "faux",
            "model": "faux-1",
            "request_sha256": "x",
            "lease_expires": ahead,
        },
    )
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(calls)
            .where(calls.c.job_id == job_id)
            .values(lease_expires=datetime(2000, 1, 1, tzinfo=UTC))
        )


def poisoned(ledger: Ledger, body: str, job_id: str = "a-poison") -> None:
    """A claimed and expired job whose stored body is ``body``: one that no longer reads."""
    claimed_and_expired(ledger, job_id)
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(job_json=body))


@pytest.mark.parametrize(
    "job_json",
    [
        '{truncated, "state": "where is my parcel"',
        '{"id": "a-poison", "reply_to": "r", "questions": "old"}',
        '["where is my parcel"]',
    ],
    ids=["not-json", "another-shape", "not-an-object"],
)
def test_an_unreadable_expired_claim_is_booked_and_its_job_escalated_without_running_it(
    ledger_url: str, job_json: str
) -> None:
    # Before, the claim was left claimed for good (listed and skipped by every round): the
    # job had no terminal message and its budget reservation stayed held.
    with migrated(ledger_url) as (settings, ledger):
        poisoned(ledger, job_json)
        claimed_and_expired(ledger, "b-good")
        runner, faux, sink = faux_runner(settings, ledger)
        with capture_logs() as logs:
            assert asyncio.run(reap_once(ledger, runner)) == 2
        assert ledger.expired_claims() == []
        for job_id in ("a-poison", "b-good"):
            call = ledger.get_call(job_id, "decide")
            assert call is not None and call.status == "unknown"
        # One escalation each, and no rejection for a job whose call may have been sent;
        # nothing is sent.
        sent = sorted((m.job_id, m.type) for m in sink.snapshot())
        assert sent == [("a-poison", "escalation"), ("b-good", "escalation")]
        assert faux.total() == 0
        poison = ledger.get_job("a-poison")
        assert poison is not None and poison.terminal_reason == "decision_interrupted"
        assert "no longer reads as a job" in (poison.terminal_message or "")
        [said] = [e for e in logs if e["event"] == "reaper.unreadable_job"]
        assert said["job_id"] == "a-poison" and said["step"] == "decide"
        assert all(BODY_MARK not in str(e) and "truncated" not in str(e) for e in logs)
        # The next round finds nothing left to settle.
        assert asyncio.run(reap_once(ledger, runner)) == 0


class Loop:
    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)


@pytest.mark.parametrize("failing", ["reap", "relay", "recovery"])
def test_one_failing_step_does_not_skip_the_others(
    monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    ran: dict[str, int] = {"reap": 0, "relay": 0, "recovery": 0}
    rounds = threading.Event()

    def step(name: str) -> Any:
        async def work(*_: Any, **__: Any) -> int:
            ran[name] += 1
            if min(ran.values()) >= 2:
                rounds.set()
            if name == failing:
                raise RuntimeError(f"{name} broke")
            return 0

        return work

    recovery = SimpleNamespace(run_once=step("recovery"))
    ctx = SimpleNamespace(loop=Loop(), ledger=object(), runner=object(), settings=object())
    monkeypatch.setattr(context, "current", lambda: ctx)
    monkeypatch.setattr(reaper, "reap_once", step("reap"))
    monkeypatch.setattr(reaper, "relay_outbox", step("relay"))
    monkeypatch.setattr(reaper.Recovery, "from_settings", classmethod(lambda cls, s: recovery))
    monkeypatch.setattr(reaper, "store_labels", lambda: 0)
    thread = ReaperThread(0.01)
    with capture_logs() as logs:
        thread.start()
        try:
            assert rounds.wait(5), f"a step stopped running: {ran}"
        finally:
            thread.stop()
            thread.join(5)
    assert not thread.is_alive()
    failed = [e for e in logs if e["event"] == "reaper.failed"]
    assert failed and {e["step"] for e in failed} == {failing}
    assert all(e["error"] == "RuntimeError" for e in failed)


def test_a_claim_left_on_a_finished_job_is_booked_unknown_and_nothing_is_published(
    ledger_url: str,
) -> None:
    """Found by an attack: a worker frozen inside its group commit, whose open transaction
    claimed a menu turn, while another delivery finished the job (deadline_exceeded: it
    could not see the uncommitted claim); resumed, the claim committed onto the finished job
    and stayed ``claimed`` for good, listed by every reaper round and skipped, its budget
    reservation held. Its lease over, it is booked ``unknown`` at an unknown cost (it may
    have been sent; no plan is made again for a finished job), and no message goes out: the
    job has its one terminal message already."""
    with migrated(ledger_url) as (settings, ledger):
        claimed_and_expired(ledger, "c-finished")
        message = '{"type": "escalation", "job_id": "c-finished"}'
        ledger.finish_job(
            job_id="c-finished",
            message_type="escalation",
            reason="deadline_exceeded",
            message_json=message,
        )
        runner, faux, sink = faux_runner(settings, ledger)
        with capture_logs() as logs:
            assert asyncio.run(reap_once(ledger, runner)) == 0
        assert ledger.expired_claims() == []
        call = ledger.get_call("c-finished", "decide")
        assert call is not None and (call.status, call.cost_usd) == ("unknown", None)
        assert sink.snapshot() == [] and faux.total() == 0
        row = ledger.get_job("c-finished")
        assert row is not None and row.terminal_reason == "deadline_exceeded"
        assert [e["event"] for e in logs] == ["reaper.stray_claim_closed"]


@pytest.mark.parametrize("away_at", ["end_unreadable", "expire_claim"])
def test_the_ledger_away_between_the_escalation_and_the_claim_loses_nothing(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, away_at: str
) -> None:
    # Found by an attack: the claim was booked first, in a transaction of its own; the ledger
    # away (or the process killed) before the escalation left a booked claim no round lists
    # again, and the job without its terminal message for good.
    with migrated(ledger_url) as (settings, ledger):
        poisoned(ledger, '["old"]')
        runner, _faux, sink = faux_runner(settings, ledger)

        async def away_async(*_: Any, **__: Any) -> None:
            raise LedgerUnavailable("the ledger went away")

        def away(*_: Any, **__: Any) -> None:
            raise LedgerUnavailable("the ledger went away")

        with monkeypatch.context() as patched:
            if away_at == "end_unreadable":
                patched.setattr(runner.delivery, "end_unreadable", away_async)
            else:
                patched.setattr(ledger, "expire_claim", away)
            with pytest.raises(LedgerUnavailable):
                asyncio.run(reap_once(ledger, runner))
        for _ in range(2):  # the ledger is back: later rounds
            asyncio.run(reap_once(ledger, runner))
        call = ledger.get_call("a-poison", "decide")
        assert call is not None and call.status == "unknown"
        row = ledger.get_job("a-poison")
        assert row is not None and row.finished
        assert [(m.job_id, m.type) for m in sink.snapshot()] == [("a-poison", "escalation")]
        assert '"kind":"decide"' in (row.terminal_message or "").replace(" ", "")


#: A body an older release stored, of a shape this release refuses.
OLD_SHAPE = '{"id": "a-poison", "reply_to": "r", "questions": "old"}'


@pytest.mark.parametrize("reaper_first", [True, False], ids=["reaper-first", "redelivery-first"])
def test_a_redelivery_of_a_body_this_release_refuses_adds_no_second_terminal_message(
    ledger_url: str, reaper_first: bool
) -> None:
    # Found by an attack: the redelivery published a rejected (telling the producer to submit
    # again what may have been paid) and the reaper an escalation: two terminal messages.
    with migrated(ledger_url) as (settings, ledger):
        poisoned(ledger, OLD_SHAPE)
        runner, faux, sink = faux_runner(settings, ledger)
        steps = [
            lambda: asyncio.run(reap_once(ledger, runner)),
            lambda: asyncio.run(runner.run_one(json.loads(OLD_SHAPE))),
        ]
        for step in steps if reaper_first else steps[::-1]:
            step()
        asyncio.run(reap_once(ledger, runner))  # and a later round
        mine = [m.type for m in sink.snapshot() if m.job_id == "a-poison"]
        assert mine == ["escalation"], mine
        assert faux.total() == 0


def test_a_real_redelivery_is_held_though_its_stored_body_is_a_model_dump(
    ledger_url: str,
) -> None:
    # Found by an attack on a first version that compared the fields: the ledger stores the
    # earlier release's dump of the job (each question's defaults filled), never the
    # producer's body, so a redelivered body never matched and was rejected beside the
    # reaper's escalation. Judged by the stored body: it no longer reads (a field this
    # release refuses).
    with migrated(ledger_url) as (settings, ledger):
        raw = {**decide_job("old"), "legacy_hint": "x"}  # a field an older release took
        dumped = json.loads(parse_job(decide_job("old")).model_dump_json())
        poisoned(ledger, json.dumps({**dumped, "legacy_hint": "x"}), job_id="old")
        runner, faux, sink = faux_runner(settings, ledger)
        asyncio.run(runner.run_one(raw))
        asyncio.run(reap_once(ledger, runner))
        assert [m.type for m in sink.snapshot() if m.job_id == "old"] == ["escalation"]
        assert faux.total() == 0


def test_a_body_of_another_producer_under_a_running_jobs_id_is_rejected(
    ledger_url: str,
) -> None:
    # Found by an attack on a first version that compared the fields a body has: the id
    # alone "equalled" the stored body, and the victim's open job was ended, interrupted.
    with migrated(ledger_url) as (settings, ledger):
        body = decide_job("victim")
        job = parse_job(body)
        ledger.open_job(
            job_id="victim", kind="decide", batch=None, reply_to="r",
            fingerprint=job_fingerprint(job),
            deadline=datetime.now(UTC) + timedelta(seconds=60),
            job_json=job.model_dump_json(),
        )  # fmt: skip
        runner, faux, _sink = faux_runner(settings, ledger)
        assert asyncio.run(runner.run_one({"id": "victim"})) == "rejected"
        row = ledger.get_job("victim")
        assert row is not None and not row.finished
        assert asyncio.run(runner.run_one(body)) != "escalation"  # its own delivery decides
        assert faux.total() == 1


@pytest.mark.parametrize("job_id", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
def test_an_invalid_body_whose_id_no_ledger_holds_is_rejected(
    ledger_url: str, job_id: str
) -> None:
    # Found by an attack: looked up in the ledger before its rejection, such an id raised
    # (UnicodeEncodeError, PostgreSQL's DataError) out of the task: a traceback, no reply.
    with migrated(ledger_url) as (settings, ledger):
        runner, faux, _sink = faux_runner(settings, ledger)
        assert asyncio.run(runner.run_one({"id": job_id, "reply_to": "r"})) == "rejected"
        assert faux.total() == 0
