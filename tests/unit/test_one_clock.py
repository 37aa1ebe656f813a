"""One clock (issue 15, defects 4 and 5): leases, deadlines and expiry go by the ledger
database's time, never by a producer's ``submitted_at`` nor by a worker's own clock."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.fingerprint import job_fingerprint
from shared.job_parsing import job_deadline, parse_job
from shared.replies import EscalationMessage, ResultMessage, parse_reply
from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import CallOutcome, Ledger
from worker.providers import ProviderRegistry
from worker.recovery.reaper import reap_once
from worker.testing.faux import FauxProvider

REAL_DATETIME = datetime


class Crash(BaseException):
    """The worker was killed here (kill -9 in flight)."""


class DiesAfterClaiming(Ledger):
    def open_and_claim(self, *, job: dict[str, Any], claim: dict[str, Any]) -> Any:
        super().open_and_claim(job=job, claim=claim)
        raise Crash("killed with the request in flight")


def settings_for(tmp_path: Path, **over: Any) -> Settings:
    return Settings(
        _env_file=None, ledger_url=f"sqlite:///{tmp_path / 'l.db'}", faux_url=None, **over
    )


def decide_job(job_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "reply_to": "r",
        "state": "A customer writes: where is my parcel?",
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
        **fields,
    }


def runner_for(settings: Settings, ledger: Ledger, faux: FauxProvider, sink: MemorySink) -> Runner:
    return Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(settings, faux_transport=faux.transport()),
        sink=sink,
    )


def test_a_submitted_at_past_the_ledgers_now_is_clamped_to_it() -> None:
    now = REAL_DATETIME(2030, 1, 1, tzinfo=UTC)
    job = parse_job(decide_job("far", submitted_at="2099-01-01T00:00:00Z", timeout_s=10))
    deadline = job_deadline(job, default_s=120, ceiling_s=900, now=now)
    assert now < deadline <= now + timedelta(seconds=15)


def test_a_job_from_2099_killed_in_flight_is_still_settled_by_the_reaper(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, default_timeout_s=1, deadline_ceiling_s=1, lease_margin_s=0.5)
    raw = decide_job("from-2099", submitted_at="2099-06-01T00:00:00Z", timeout_s=1)
    dying = DiesAfterClaiming.from_settings(settings)
    dying.migrate()
    faux = FauxProvider()
    with pytest.raises(Crash):
        asyncio.run(runner_for(settings, dying, faux, MemorySink()).run_one(raw))
    ledger = Ledger.from_settings(settings)
    call = ledger.get_call("from-2099", "decide")
    assert call is not None and call.status == "claimed"
    assert call.lease_expires < ledger.now() + timedelta(seconds=5)

    asyncio.run(asyncio.sleep(2))  # the lease runs out (1 s deadline + 0.5 s margin)
    sink = MemorySink()
    assert asyncio.run(reap_once(ledger, runner_for(settings, ledger, faux, sink))) == 1

    call = ledger.get_call("from-2099", "decide")
    assert call is not None and call.status == "unknown"
    [published] = sink.snapshot()
    message = parse_reply(published.message)
    assert isinstance(message, EscalationMessage) and message.reason == "decision_interrupted"
    assert faux.total() == 0


def skew_worker_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Every worker and shared module's ``datetime`` runs ``seconds`` ahead (the time source
    a worker's process reads), as on a machine whose clock is off."""

    class Same(type):
        # A real datetime (read from the database, say) is still a datetime here.
        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, REAL_DATETIME)

    class Ahead(REAL_DATETIME, metaclass=Same):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return REAL_DATETIME.now(tz) + timedelta(seconds=seconds)

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("worker", "shared") and (
            getattr(module, "datetime", None) is REAL_DATETIME
        ):
            monkeypatch.setattr(module, "datetime", Ahead)


def test_a_worker_45_s_ahead_does_not_expire_a_live_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.delivery.calls as delivery_calls

    monkeypatch.setattr(delivery_calls, "CLAIM_POLL_S", 0.05)
    settings = settings_for(tmp_path, lease_margin_s=0.5)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    raw = decide_job("live", timeout_s=10)
    job = parse_job(raw)
    # Delivery A (a worker with a true clock) opened the job and holds its call's claim.
    deadline = REAL_DATETIME.now(UTC) + timedelta(seconds=10)
    ledger.open_job(
        job_id="live",
        kind="decide",
        batch=None,
        reply_to="r",
        fingerprint=job_fingerprint(job),
        deadline=deadline,
        job_json=job.model_dump_json(),
    )
    ledger.claim(
        job_id="live",
        step="decide",
        provider="faux",
        model=None,
        request_sha256="x",
        lease_expires=deadline + timedelta(seconds=0.5),
    )
    theirs = ResultMessage(job_id="live", answers={}).to_json()

    async def a_finishes() -> None:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(
            ledger.finish_job,
            job_id="live",
            message_type="result",
            reason=None,
            message_json=theirs,
            outcome=CallOutcome(
                step="decide", status="answered", cost_usd=0.001, cost_basis="reported"
            ),
        )

    # Delivery B runs on a worker whose clock is 45 s ahead.
    skew_worker_clock(monkeypatch, 45)
    faux = FauxProvider()
    sink = MemorySink()
    b = runner_for(settings, Ledger.from_settings(settings), faux, sink)

    async def both() -> str:
        outcome, _ = await asyncio.gather(b.run_one(raw), a_finishes())
        return outcome

    assert asyncio.run(both()) == "result"
    assert [m.message for m in sink.snapshot()] == [theirs]
    call = ledger.get_call("live", "decide")
    assert call is not None and call.status == "answered"
    assert faux.total() == 0


def test_the_ledger_clock_keeps_counting_through_an_outage() -> None:
    from worker.ledger.clock import DatabaseClock

    readings = [REAL_DATETIME(2030, 1, 1, tzinfo=UTC)]
    calls = 0

    def read() -> datetime:
        nonlocal calls
        calls += 1
        if not readings:
            raise ConnectionError("the database is down")
        return readings.pop()

    clock = DatabaseClock(read, resync_s=0)
    first = clock()
    second = clock()  # the database is down now: counted on from the first reading
    assert first <= second < first + timedelta(seconds=5)
    assert calls == 2
