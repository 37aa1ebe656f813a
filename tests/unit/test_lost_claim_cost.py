"""A call lost with its worker is booked at the provider's rule for an unknown outcome."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.fingerprint import job_fingerprint
from shared.job_parsing import parse_job
from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.kinds.decide import DECIDE_STEP
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger
from worker.providers import ProviderRegistry


@pytest.mark.parametrize(
    ("provider", "model", "cost", "basis"),
    [("parallel", None, 0.001, "estimate"), ("openrouter", "liquid/d1", None, None)],
)
def test_an_expired_claim_is_booked_unknown_at_the_providers_price(
    tmp_path: Path, provider: str, model: str | None, cost: float | None, basis: str | None
) -> None:
    settings = Settings(ledger_url=f"sqlite:///{tmp_path / 'l.db'}")
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    raw = {
        "id": f"lost-{provider}",
        "reply_to": "r",
        "state": "s",
        "provider": provider,
        "questions": {"q": {"type": "noul", "instructions": "Urgent?"}},
    }
    if model:
        raw["model"] = model
    job = parse_job(raw)
    past = datetime.now(UTC) - timedelta(seconds=5)
    ledger.open_job(
        job_id=job.id,
        kind="decide",
        batch=None,
        reply_to="r",
        fingerprint=job_fingerprint(job),
        deadline=past,
        job_json=job.model_dump_json(),
    )
    # A worker claimed the call and died with it in flight: the lease has run out.
    ledger.claim(
        job_id=job.id,
        step=DECIDE_STEP,
        provider=provider,
        model=model,
        request_sha256="x",
        lease_expires=past,
    )
    sink = MemorySink()
    runner = Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(settings),
        sink=sink,
    )
    assert asyncio.run(runner.run_one(raw)) == "escalation"
    call = ledger.get_call(job.id, DECIDE_STEP)
    assert call is not None and call.status == "unknown"
    assert (call.cost_usd, call.cost_basis) == (cost, basis)
    message = json.loads(sink.snapshot()[0].message)
    assert message["reason"] == "decision_interrupted"
    assert runner.stats.requests_sent == 0
