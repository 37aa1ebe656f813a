"""Packing across jobs, run: a packed batch through the embedded worker against the faux
server, its requests counted there and compared with the packing the limits allow and with
the dry run; each job's answers are the faux's own answers to that job's questions; a crash
between two packed requests repeats neither; a member met alone replays."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from rich.console import Console

from shared.client import Client
from shared.replies import EscalationMessage, ResultMessage, parse_reply
from tests.judgments.support import REPLY_TO, faux_noul, replies, settings_for
from worker.cli.trace import render
from worker.delivery.sinks import MemorySink
from worker.embedded import run_batch
from worker.kinds.dispatch import Runner
from worker.ledger import Ledger, PackClaim
from worker.ledger.models import calls
from worker.providers import ProviderRegistry
from worker.testing.faux import FauxServer

BATCH = "packs-test"
STATE = "Store policy: refunds within 30 days of delivery; opened software is final sale."
QUESTIONS = 3
#: Whole jobs of 3 questions in one Parallel request of at most 100.
JOBS_PER_PARALLEL_REQUEST = 100 // QUESTIONS


def packed_job(job_id: str, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "batch": BATCH,
        "reply_to": REPLY_TO,
        "state": STATE,
        "questions": {
            f"q{k}": {"type": "noul", "instructions": f"Request {job_id}, clause {k}: refund?"}
            for k in range(QUESTIONS)
        },
    }
    job.update(fields)
    return job


def test_a_packed_batch_sends_what_the_limits_allow_and_the_dry_run_said(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url, pack_chunk_size=100)
    batch = [packed_job(f"p{i:03d}", provider="parallel") for i in range(140)]
    batch += [packed_job(f"f{i}", state="Another store's policy.") for i in range(5)]
    batch += [packed_job("alone", state="A state no other job shares.")]
    estimate = Client(settings).estimate(batch, reply_to=REPLY_TO, store=False, pack=True)

    summary = run_batch(batch, settings=settings, out_dir=tmp_path / "out", pack=True,
                        timeout_s=60)

    # Parallel: messages of 100 and 40 jobs, 33 jobs a request (33+33+33+1, 33+7; the one
    # left over goes alone); the faux: one request for the 5 jobs of one state; the job with
    # a state of its own goes alone.
    parallel_requests = math.ceil(100 / 33) + math.ceil(40 / 33)
    sent = server.provider.calls()
    assert sum(sent.values()) == parallel_requests + 1 + 1 == 8
    assert all(n == 1 for n in sent.values())
    assert {key for key in sent if not key.startswith("pack:")} == {"p099/decide", "alone/decide"}
    assert summary.requests_sent == estimate.total.requests == 8

    got = replies(tmp_path / "out")
    assert set(got) == {j["id"] for j in batch}
    sizes: Counter[int] = Counter()
    for job in batch:
        reply = got[job["id"]]
        assert isinstance(reply, ResultMessage), reply
        [receipt] = reply.receipts
        # Each job has exactly its own questions' answers: the faux's answer to each.
        model = "parallel-fast" if job.get("provider") == "parallel" else "faux-1"
        assert set(reply.answers) == set(job["questions"])
        for qid, question in job["questions"].items():
            assert reply.answers[qid].probability == pytest.approx(
                faux_noul(model, question, job["state"])
            )
        assert set(receipt.confidence_source) <= set(job["questions"])
        if receipt.packed is not None:
            sizes[receipt.packed.jobs] += 1
            assert receipt.packed.share == pytest.approx(1 / receipt.packed.jobs)
            assert receipt.packed.saved_usd is not None and receipt.packed.saved_usd > 0
    assert got["alone"].receipts[0].packed is None
    # 33 + 33 + 33 + 1 (alone in its request) + 33 + 7; the faux's five.
    assert sizes == {33: 4 * 33, 7: 7, 5: 5}
    assert got["p099"].receipts[0].packed is None

    # Each job is billed its share; the shares add up to what was booked and estimated.
    billed = sum(got[j["id"]].receipts[0].cost_usd for j in batch)
    assert billed == pytest.approx(estimate.total.cost_known_usd, rel=1e-6)
    parallel = [got[j["id"]].receipts[0] for j in batch if j.get("provider") == "parallel"]
    packed_parallel = [r for r in parallel if r.packed is not None]
    assert {r.packed.request_cost_usd for r in packed_parallel if r.packed} == {
        settings.parallel_list_price_usd
    }
    assert all(
        r.packed is not None
        and r.packed.saved_usd == pytest.approx(
            settings.parallel_list_price_usd * (1 - 1 / r.packed.jobs)
        )
        for r in packed_parallel
    )
    status = Ledger.from_settings(settings).status(BATCH)
    assert (status.requests_sent, status.calls_sent, status.requests_packed) == (8, len(batch), 6)

    # Run again, packed or not: every job replays from the ledger, nothing is sent.
    again = run_batch(batch, settings=settings, out_dir=tmp_path / "again", timeout_s=60)
    assert again.requests_sent == 0
    assert server.provider.calls() == sent
    assert {k: v.to_json() for k, v in replies(tmp_path / "again").items()} == {
        k: v.to_json() for k, v in got.items()
    }


class Crash(BaseException):
    """The worker died here (a BaseException: no ``except Exception`` stops it)."""


class DiesAfterTheSecondPackClaim(Ledger):
    """A ledger whose process dies right after the second packed claim committed."""

    packs_claimed = 0

    def claim_pack(self, **kwargs: Any) -> PackClaim:
        claim = super().claim_pack(**kwargs)
        type(self).packs_claimed += 1
        if type(self).packs_claimed == 2:
            raise Crash("killed after claiming the second packed request")
        return claim


def expire_leases(ledger: Ledger) -> None:
    """Time passes beyond the dead delivery's leases (the jobs' deadlines still ahead)."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(calls)
            .where(calls.c.status == "claimed")
            .values(lease_expires=datetime.now(UTC) - timedelta(seconds=1))
        )


def test_a_crash_between_two_packed_requests_repeats_neither(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url)
    n = 3 * JOBS_PER_PARALLEL_REQUEST  # three packed requests in one message
    message = [
        {**packed_job(f"c{i:03d}", provider="parallel"), "pack": True} for i in range(n)
    ]
    ledger = DiesAfterTheSecondPackClaim.from_settings(settings)
    ledger.migrate()
    first_sink = MemorySink()
    runner = Runner(
        settings=settings, ledger=ledger, providers=ProviderRegistry.from_settings(settings),
        sink=first_sink,
    )
    with pytest.raises(Crash):
        asyncio.run(runner.run_chunk(message))
    first = server.provider.calls()
    assert list(first.values()) == [1]  # the first request went out; the second never did
    by_status = Counter(c.status for j in message for c in ledger.calls(j["id"]))
    assert by_status == {"answered": 33, "claimed": 33}
    expire_leases(ledger)

    summary = run_batch(message, settings=settings, out_dir=tmp_path / "out", timeout_s=60)

    sent = server.provider.calls()
    assert summary.requests_sent == 1  # the third request, once
    assert len(sent) == 2 and all(v == 1 for v in sent.values())
    assert set(first) < set(sent)
    got = replies(tmp_path / "out")
    results = sorted(k for k, v in got.items() if isinstance(v, ResultMessage))
    interrupted = sorted(
        k for k, v in got.items()
        if isinstance(v, EscalationMessage) and v.reason == "decision_interrupted"
    )
    ids = [j["id"] for j in message]
    assert results == ids[:33] + ids[66:]
    assert interrupted == ids[33:66]
    # The first request's jobs were finished before the crash: the same messages again.
    before = {m.job_id: json.loads(m.message) for m in first_sink.snapshot()}
    assert sorted(before) == ids[:33]
    assert all(json.loads(got[i].to_json()) == before[i] for i in ids[:33])
    assert all(got[i].receipts[0].packed is not None for i in ids[:33] + ids[66:])
    assert not any(got[i].receipts[0].replayed for i in ids[:33] + ids[66:])
    assert all(got[i].receipts[0].replayed for i in ids[33:66])
    statuses = Counter(
        (c.status, c.error_code) for j in message for c in Ledger.from_settings(settings).calls(
            j["id"]
        )
    )
    assert statuses == {("answered", None): 66, ("unknown", "lease_expired"): 33}
    # The interrupted jobs' calls still say which request they were in: one, never sent again.
    packs = {c.pack_id for i in ids[33:66] for c in Ledger.from_settings(settings).calls(i)}
    assert len(packs) == 1 and None not in packs


def test_a_member_met_alone_replays_its_own_answers(
    tmp_path: Path, server: FauxServer
) -> None:
    settings = settings_for(tmp_path, server.url)
    batch = [packed_job(f"m{i}", pack=True) for i in range(4)]
    run_batch(batch, settings=settings, out_dir=tmp_path / "packed", timeout_s=60)
    assert sum(server.provider.calls().values()) == 1
    packed = replies(tmp_path / "packed")

    # The third job alone, to another stream, without ``pack``: its own call, replayed.
    alone = {**batch[2], "reply_to": "packs-test:alone"}
    alone.pop("pack")
    sink = MemorySink()
    runner = Runner(
        settings=settings,
        ledger=Ledger.from_settings(settings),
        providers=ProviderRegistry.from_settings(settings),
        sink=sink,
    )
    assert asyncio.run(runner.run_one(alone)) == "result"
    assert sum(server.provider.calls().values()) == 1
    [published] = [m for m in sink.snapshot() if m.job_id == "m2"]
    reply = parse_reply(published.message)
    assert json.loads(reply.to_json())["answers"] == json.loads(packed["m2"].to_json())["answers"]

    # ``decisions trace`` says whom the call's request was shared with.
    ledger = Ledger.from_settings(settings)
    row = ledger.get_job("m2")
    assert row is not None
    console = Console(record=True, width=200)
    console.print(render(row, ledger.calls("m2")))
    assert "with 4 jobs, saved $" in console.export_text()
