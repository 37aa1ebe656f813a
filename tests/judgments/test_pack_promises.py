"""Packs keep each member's own promises (issue 15, defects 12, 13, 15): a job id twice in
one message is one job; one member's short deadline does not cut the others' request
short; a lost packed request is booked once, its cost split across its members."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.replies import EscalationMessage, ResultMessage, parse_reply
from tests.judgments.support import REPLY_TO, settings_for
from worker.delivery.sinks import MemorySink
from worker.kinds.dispatch import Runner
from worker.kinds.packs import deadline_bands
from worker.ledger import ClaimLost, JobRow, Ledger
from worker.ledger.models import calls
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer

STATE = "Store policy: refunds within 30 days of delivery; opened software is final sale."


def member(job_id: str, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "batch": "promises",
        "reply_to": REPLY_TO,
        "state": STATE,
        "pack": True,
        "questions": {"q": {"type": "noul", "instructions": f"Request {job_id}: refund?"}},
    }
    job.update(fields)
    return job


def runner_for(settings: Any, ledger: Ledger, sink: MemorySink) -> Runner:
    return Runner(
        settings=settings,
        ledger=ledger,
        providers=ProviderRegistry.from_settings(settings),
        sink=sink,
    )


def test_a_job_id_twice_in_one_packed_message_is_one_job(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    sink = MemorySink()
    message = [member("twice"), member("other"), member("twice")]

    outcomes = asyncio.run(runner_for(settings, ledger, sink).run_chunk(message))

    assert outcomes == ["result", "result", "result"]
    assert sum(server.provider.calls().values()) == 1
    assert [c.status for c in ledger.calls("twice")] == ["answered"]
    published = Counter(m.job_id for m in sink.snapshot())
    assert published == {"twice": 1, "other": 1}  # the copy publishes once (publish-once)


def test_one_members_short_deadline_does_not_interrupt_the_others(
    tmp_path: Path, server: FauxServer
) -> None:
    server.provider.update_behaviour(latency_ms=1500)
    settings = settings_for(tmp_path, server.url)
    ledger = Ledger.from_settings(settings)
    ledger.migrate()
    sink = MemorySink()
    message = [member("hurried", timeout_s=0.5)]
    message += [member(f"patient{i}", timeout_s=120) for i in range(3)]

    outcomes = asyncio.run(runner_for(settings, ledger, sink).run_chunk(message))

    got = {m.job_id: parse_reply(m.message) for m in sink.snapshot()}
    assert outcomes[1:] == ["result"] * 3
    assert all(isinstance(got[f"patient{i}"], ResultMessage) for i in range(3))
    hurried = got["hurried"]
    assert isinstance(hurried, EscalationMessage)
    # The three patient jobs shared one request; the hurried one went alone.
    packs = {c.pack_id for i in range(3) for c in ledger.calls(f"patient{i}")}
    assert len(packs) == 1 and None not in packs
    assert all(c.pack_id is None for c in ledger.calls("hurried"))


def test_deadline_bands_keep_close_deadlines_together_in_order() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    at = [now + timedelta(seconds=s) for s in (120, 0.5, 100, 130, 300, 0.6)]
    assert deadline_bands(at, now) == [[1, 5], [0, 2, 3], [4]]


class DiesAfterTheAnswer(Ledger):
    """A ledger whose process dies once the packed request was answered, before its record."""

    def finish_pack(self, *, members: Any) -> list[JobRow | ClaimLost]:
        raise Crash("killed after the answer, before its record")


class Crash(BaseException):
    """The worker died here."""


def test_a_lost_packed_request_is_booked_once_split_across_its_members(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url)
    message = [member(f"lost{i}", provider="parallel") for i in range(5)]
    dying = DiesAfterTheAnswer.from_settings(settings)
    dying.migrate()
    with pytest.raises(Crash):
        asyncio.run(runner_for(settings, dying, MemorySink()).run_chunk(message))
    assert sum(server.provider.calls().values()) == 1
    ledger = Ledger.from_settings(settings)
    with ledger.engine.begin() as conn:  # the dead worker's leases run out
        conn.execute(
            sa.update(calls)
            .where(calls.c.status == "claimed")
            .values(lease_expires=datetime.now(UTC) - timedelta(seconds=1))
        )

    # Each member redelivered alone (the reaper's path): booked unknown, never sent again.
    runner = runner_for(settings, ledger, MemorySink())
    for job in message:
        assert asyncio.run(runner.run_one(job)) == "escalation"

    assert sum(server.provider.calls().values()) == 1
    status = ledger.status()
    assert status.requests_sent == 1
    assert status.calls_by_status == {"unknown": 5}
    assert status.cost_by_basis["estimate"] == pytest.approx(0.001, abs=1e-9)
