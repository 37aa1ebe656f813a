"""A worker dies between two packed requests of a sift job: the ledger holds ``sift.0``
answered and ``sift.1`` claimed, never recorded. The job's next delivery replays ``sift.0``,
books ``sift.1`` unknown without sending it (its items are reported interrupted), and sends
each later request once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shared.replies import EscalationMessage, parse_reply
from tests.judgments.support import settings_for, sift_job
from worker.delivery.sinks import MemorySink
from worker.embedded import run_batch
from worker.kinds.dispatch import Runner
from worker.ledger import Claim, Ledger
from worker.ledger.models import calls
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer


class Crash(BaseException):
    """The worker died here (a BaseException: no ``except Exception`` stops it)."""


class DiesAfterClaiming(Ledger):
    """A ledger whose process dies right after the claim of ``step`` committed."""

    step = "sift.1"

    def claim(self, **kwargs: Any) -> Claim:
        claim = super().claim(**kwargs)
        if kwargs["step"] == self.step:
            raise Crash(f"killed after claiming {self.step}")
        return claim


def expire_leases(ledger: Ledger, job_id: str) -> None:
    """Time passes beyond the dead delivery's leases (the job's deadline still ahead)."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(calls)
            .where((calls.c.job_id == job_id) & (calls.c.status == "claimed"))
            .values(lease_expires=datetime.now(UTC) - timedelta(seconds=1))
        )


def test_a_crash_between_packed_requests_repeats_none_of_them(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url)
    job = sift_job("crashy", [f"message {i:04d}" for i in range(350)], provider="parallel")
    ledger = DiesAfterClaiming.from_settings(settings)
    ledger.migrate()
    runner = Runner(
        settings=settings, ledger=ledger, providers=ProviderRegistry.from_settings(settings),
        sink=MemorySink(),
    )
    with pytest.raises(Crash):
        asyncio.run(runner.run_one(job))
    assert server.provider.calls() == {"crashy/sift.0": 1}
    assert {c.step: c.status for c in ledger.calls("crashy")} == {
        "sift.0": "answered", "sift.1": "claimed",
    }
    expire_leases(ledger, "crashy")

    summary = run_batch([job], settings=settings, out_dir=tmp_path / "out", timeout_s=60)

    assert server.provider.calls() == {"crashy/sift.0": 1, "crashy/sift.2": 1, "crashy/sift.3": 1}
    assert summary.requests_sent == 2
    statuses = {c.step: (c.status, c.error_code) for c in Ledger.from_settings(settings).calls(
        "crashy"
    )}
    assert statuses == {
        "sift.0": ("answered", None),
        "sift.1": ("unknown", "lease_expired"),
        "sift.2": ("answered", None),
        "sift.3": ("answered", None),
    }
    # The lost request is booked at the provider's rule, as a decide job's is: Parallel's
    # list price as an estimate (the seed), not an unknown cost.
    [lost] = [c for c in Ledger.from_settings(settings).calls("crashy") if c.step == "sift.1"]
    assert (lost.cost_usd, lost.cost_basis) == (settings.parallel_list_price_usd, "estimate")
    [line] = (tmp_path / "out" / "escalations.jsonl").read_text().splitlines()
    reply = parse_reply(line)
    assert isinstance(reply, EscalationMessage) and reply.reason == "decision_interrupted"
    assert reply.items is not None and len(reply.items) == 350
    interrupted = [i.index for i in reply.items if i.status == "interrupted"]
    assert interrupted == list(range(100, 200))
    assert all(i.keep is None and i.probability is None for i in reply.items[100:200])
    assert all(i.status == "decided" and i.keep is not None
               for i in reply.items[:100] + reply.items[200:])
    receipts = {r.step: r for r in reply.receipts}
    assert receipts["sift.0"].replayed and not receipts["sift.2"].replayed
    assert receipts["sift.1"].status == "unknown"
    # What a reviewer answers: the interrupted items' questions are all there.
    assert {f"item.{i}" for i in interrupted} <= set(reply.context["questions"])


def redelivered_after_a_deploy(
    tmp_path: Path,
    server: FauxServer,
    job: dict[str, Any],
    dies: type[DiesAfterClaiming],
    *,
    before: str,
    after: str,
) -> tuple[Ledger, EscalationMessage]:
    """``job`` run with ``before`` as the default provider until ``dies`` kills it, then
    delivered again, its leases run out, with ``after`` as the default: the ledger and the
    job's one terminal message (an escalation)."""
    first = settings_for(tmp_path, server.url, default_provider=before)
    ledger = dies.from_settings(first)
    ledger.migrate()
    runner = Runner(
        settings=first, ledger=ledger, providers=ProviderRegistry.from_settings(first),
        sink=MemorySink(),
    )
    with pytest.raises(Crash):
        asyncio.run(runner.run_one(job))
    expire_leases(ledger, job["id"])
    second = settings_for(tmp_path, server.url, default_provider=after)

    run_batch([job], settings=second, out_dir=tmp_path / "out", timeout_s=60)

    [line] = (tmp_path / "out" / "escalations.jsonl").read_text().splitlines()
    reply = parse_reply(line)
    assert isinstance(reply, EscalationMessage) and reply.reason == "decision_interrupted"
    assert reply.items is not None
    assert {i.status for i in reply.items} == {"interrupted"}
    return ledger, reply


def test_a_delivery_planned_otherwise_never_takes_another_requests_answers(
    tmp_path: Path, server: FauxServer
) -> None:
    # First delivered with Parallel as the default (100 items a request), then, after a
    # deploy, with the faux (all 350 items fit one request): the stored sift.0 is not the
    # request this delivery would send, so its answers are not read as this plan's.
    job = sift_job("moved", [f"message {i:04d}" for i in range(350)])
    _ledger, reply = redelivered_after_a_deploy(
        tmp_path, server, job, DiesAfterClaiming, before="parallel", after="faux"
    )
    assert server.provider.calls() == {"moved/sift.0": 1}
    assert "another request" in reply.detail


class DiesAfterClaimingTheFirst(DiesAfterClaiming):
    step = "sift.0"


def test_items_of_an_unknown_request_are_not_asked_again_by_a_plan_of_more_requests(
    tmp_path: Path, server: FauxServer
) -> None:
    # Found by an attack: first delivered with the faux as the default (all 350 items in one
    # request), killed after its claim; then, after a deploy, with Parallel (100 items a
    # request). sift.0 was reported interrupted, but sift.1 to sift.3 had no rows and were
    # claimed and sent: items 100 to 349, whose request's outcome is unknown, paid again.
    job = sift_job("grown", [f"message {i:04d}" for i in range(350)])
    ledger, reply = redelivered_after_a_deploy(
        tmp_path, server, job, DiesAfterClaimingTheFirst, before="faux", after="parallel"
    )
    assert server.provider.calls() == {}
    assert reply.items is not None and len(reply.items) == 350
    with ledger.engine.connect() as conn:  # nothing claimed for the steps never sent
        steps = conn.execute(sa.select(calls.c.step).where(calls.c.job_id == "grown")).all()
    assert [s for (s,) in steps] == ["sift.0"]


BATCH = "gap-batch"


class RaisedThenDies(Ledger):
    """sift.0 is refused by the batch's budget (0.0005 < Parallel's 0.001 a request); an
    operator raises the budget (``decisions budget set``) while the job runs, so sift.1 is
    claimed; the worker dies right after that claim."""

    def claim(self, **kwargs: Any) -> Claim:
        if kwargs["step"] == "sift.1":
            self.set_budget(BATCH, 1.0)
        claim = super().claim(**kwargs)
        if kwargs["step"] == "sift.1":
            raise Crash("killed after claiming sift.1")
        return claim


def test_a_step_the_budget_refused_leaves_no_gap_for_a_redelivery_planned_otherwise(
    tmp_path: Path, server: FauxServer
) -> None:
    # Found by a second attack: the rows an earlier delivery left need not be a prefix of its
    # steps, and the redelivery's sift.0, with no row, carried items 100-199 again.
    job = sift_job("gap", [f"message {i:04d}" for i in range(350)], batch=BATCH)
    first = settings_for(tmp_path, server.url, default_provider="parallel")
    ledger = RaisedThenDies.from_settings(first)
    ledger.migrate()
    ledger.set_budget(BATCH, 0.0005)
    runner = Runner(
        settings=first, ledger=ledger, providers=ProviderRegistry.from_settings(first),
        sink=MemorySink(),
    )
    with pytest.raises(Crash):
        asyncio.run(runner.run_one(job))
    # sift.0 (items 0-99) refused, nothing claimed; sift.1 (items 100-199) claimed and,
    # for all anyone knows, sent: its outcome is unknown.
    assert {c.step: c.status for c in ledger.calls("gap")} == {"sift.1": "claimed"}
    expire_leases(ledger, "gap")

    # Redelivered after a deploy that makes the faux the default: all 350 items one request.
    second = settings_for(
        tmp_path, server.url, default_provider="faux", max_price_per_mtok_usd={"faux": 0.1}
    )
    run_batch([job], settings=second, out_dir=tmp_path / "out", timeout_s=60)

    # Items 100-199 went in a request whose outcome is unknown: none is asked again.
    assert server.provider.calls() == {}, "items of an unknown request were sent again"
    [line] = (tmp_path / "out" / "escalations.jsonl").read_text().splitlines()
    reply = parse_reply(line)
    assert isinstance(reply, EscalationMessage)
