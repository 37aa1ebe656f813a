"""Answers survive a ledger outage (issue 15, defect 14): a worker holding a provider's answer
keeps trying to record it while its claim is its own, instead of letting it lapse into
``unknown``; the outage is an error-level ``ledger.unavailable`` line naming the server, and
a Prometheus counter. The failure is injected at the ledger boundary."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.ledger import CallOutcome, ClaimLost, JobRow, Ledger, LedgerUnavailable
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxProvider

DOWN_FOR = 3  # failed writes before the ledger is back


class DiskFull(Ledger):
    """A ledger whose writes of outcomes fail ``DOWN_FOR`` times, as on a full disk."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures = DOWN_FOR

    def _fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise LedgerUnavailable(
                f"ledger unavailable at {self.url}: OperationalError: database or disk is full"
            )

    def finish_job(self, **kwargs: Any) -> JobRow:
        if kwargs.get("outcome") is not None:
            self._fail()
        return super().finish_job(**kwargs)

    def record(self, *, job_id: str, outcome: CallOutcome) -> Any:
        self._fail()
        return super().record(job_id=job_id, outcome=outcome)


def unavailable_count() -> float:
    return (
        REGISTRY.get_sample_value("decisions_ledger_unavailable_total", {"dialect": "sqlite"})
        or 0.0
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"id": "held", "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}},
        {
            "id": "held-sift",
            "kind": "sift",
            "items": ["a", "b"],
            "question": {"instructions": "Spam?"},
        },
    ],
    ids=["decide", "sift"],
)
def test_an_answer_held_through_an_outage_is_recorded_not_lost(
    tmp_path: Path, raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.delivery.outage as outage

    monkeypatch.setattr(outage, "RECORD_RETRY_FIRST_S", 0.01)
    settings = Settings(_env_file=None, ledger_url=f"sqlite:///{tmp_path / 'l.db'}", faux_url=None)
    ledger = DiskFull.from_settings(settings)
    ledger.migrate()
    faux = FauxProvider()
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(settings, faux_transport=faux.transport()),
        sink=MemorySink(),
    )
    job = {**raw, "reply_to": "r", "state": "A customer writes: where is my parcel?"}
    before = unavailable_count()

    with capture_logs() as logs:
        assert asyncio.run(runner.run_one(job)) == "result"

    assert faux.total() == 1
    assert ledger.failures == 0
    assert [c.status for c in ledger.calls(job["id"])] == ["answered"]
    outages = [e for e in logs if e["event"] == "ledger.unavailable"]
    assert len(outages) == DOWN_FOR
    assert all(e["log_level"] == "error" and e["server"] == ledger.url for e in outages)
    assert unavailable_count() - before == DOWN_FOR


def test_a_record_goes_only_onto_its_own_claim(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.migrate()
    later = ledger.now().replace(year=2099)
    ledger.open_job(
        job_id="j",
        kind="decide",
        batch=None,
        reply_to="r",
        fingerprint="f",
        deadline=later,
        job_json="{}",
    )
    claim = dict(
        step="decide", provider="faux", model=None, request_sha256="x", lease_expires=later
    )
    first = ledger.claim(job_id="j", **claim)
    ledger.record(
        job_id="j", outcome=CallOutcome(step="decide", status="not_sent", claims=first.call.claims)
    )
    second = ledger.claim(job_id="j", **claim)
    assert second.fresh and second.call.claims == 2
    # The first claim's holder retries a write it believes failed: it is not its claim now.
    with pytest.raises(ClaimLost):
        ledger.record(
            job_id="j",
            outcome=CallOutcome(step="decide", status="answered", claims=first.call.claims),
        )
    assert ledger.get_call("j", "decide").status == "claimed"  # type: ignore[union-attr]
