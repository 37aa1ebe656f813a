"""A budget that admits only part of a batch, on a fleet under faults: it never overspends.

Three real worker processes (one ``kill -9``ed mid-run and replaced) run one batch of decide
jobs carrying ``budget_usd`` against the session's faux server, through three providers
that book costs differently: ``faux`` (OpenRouter's shape: ``reported``), ``faux_est`` (a
priced System One host without a cost in its answer: ``estimate``) and ``faux_nocost`` (no
price: the cost stays unknown, held at its whole reservation). Some requests lose their
outcome at the faux (``drop_after_read``), some are slow so the kill catches them in flight.

While it runs, a sampler sums the ledger by hand every 50 ms; at the end the same sum is
checked against the budget and the budgets row, the fault checker checks at-most-once, and
every job is answered or escalated: ``budget_exhausted`` (then nothing reached the faux for
it) or ``decision_interrupted`` (its call's outcome is unknown). Then the budget is raised
and ``decisions budget resume`` runs exactly the ``budget_exhausted`` jobs again.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections import Counter
from typing import Any

import pytest

from shared.job_parsing import parse_job
from shared.settings import Settings
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import decide_job, profile, wait_until
from tests.support.processes import DECISIONS
from worker.kinds.decide import prepare_decide
from worker.ledger import CallRow, Ledger
from worker.ledger.call_ops import list_calls
from worker.ledger.models import calls as calls_table
from worker.providers import ProviderRegistry

pytestmark = pytest.mark.faults

JOBS = 45
PROVIDERS = ("faux", "faux_est", "faux_nocost")
KEY_ENV = "BUDGET_FAUX_KEY"
#: Cents' fractions are float sums; a budget is never passed by more than float noise.
NOISE = 1e-9


def _settings(faux_url: str) -> dict[str, str]:
    host = {"base_url": faux_url, "key_env": KEY_ENV, "default_model": "faux-1"}
    # Deadlines long enough that a loaded machine's queueing is not what ends the jobs.
    return profile(
        15,
        systemone_hosts=json.dumps(
            {"faux_est": {**host, "price_per_mtok_usd": 0.1}, "faux_nocost": host}
        ),
        max_price_per_mtok_usd=json.dumps({"faux": 0.1, "faux_nocost": 0.1}),
    )


def _worst(settings: dict[str, str], job: dict[str, Any]) -> float:
    """The job's worst case as the worker computes it (its prepared request's bytes)."""
    fields = {
        k: v for k, v in settings.items() if k in ("systemone_hosts", "max_price_per_mtok_usd")
    }
    registry = ProviderRegistry.from_settings(
        Settings(faux_url="http://127.0.0.1:1", **{k: json.loads(v) for k, v in fields.items()})
    )
    try:
        provider, prepared = prepare_decide(parse_job({**job, "reply_to": "x"}), registry)
        worst = registry.worst_cost(provider, prepared)
    finally:
        asyncio.run(registry.aclose())
    assert worst is not None
    return worst


def charge(call: CallRow) -> float:
    """What a call holds of the budget, by hand: its booked cost, else its reservation (in
    flight, or a cost that stayed unknown); a call never sent holds nothing."""
    if call.status == "not_sent" or call.reserved_usd is None:
        return 0.0
    if call.status == "claimed" or call.cost_usd is None:
        return call.reserved_usd
    if call.status == "unknown":  # a lost request: its booking is a guess, the worst case stays
        return max(call.cost_usd, call.reserved_usd)
    return call.cost_usd


def held(ledger: Ledger, job_ids: list[str]) -> float:
    """What the batch's calls hold, read in ONE statement: one snapshot. A sum of per-job
    reads over-counts (a call read while reserved, then settled, frees room that a call read
    later reserves: both counted whole), which once read 102% of a budget never passed."""
    with ledger.transaction(read_only=True) as conn:
        rows = list_calls(conn, calls_table.c.job_id.in_(job_ids), calls_table.c.job_id)
    return sum(charge(c) for c in rows)


def test_a_tight_budget_is_never_passed_under_races_and_kills(
    new_fleet: FleetFactory,
    faux_url: str,
    report: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "faux-key")  # the hosts' key variable (any key: a faux)
    settings = _settings(faux_url)
    crew = new_fleet("budget", settings)
    batch = "budget-race"
    jobs = [
        decide_job(f"{batch}-{i:03d}", provider=PROVIDERS[i % 3], batch=batch) for i in range(JOBS)
    ]
    worst = max(_worst(settings, job) for job in jobs)
    # Room for about 14 worst cases: most settle at a quarter of it, unknown costs keep it
    # whole, so a part of the batch fits and the rest does not.
    budget = round(worst * 14, 9)
    for job in jobs:
        job["budget_usd"] = budget
    ids = [job["id"] for job in jobs]
    lost = ids[1:JOBS:6]  # outcomes lost at the faux (every provider among them)
    slow = [j for j in ids[3:JOBS:5] if j not in lost]
    crew.slow(150)
    crew.misbehave(lost, mode="drop_after_read")
    crew.misbehave(slow, latency_ms=2500)

    workers = [crew.start_worker() for _ in range(3)]
    samples: list[float] = []  # the calls' holdings, summed by hand in one snapshot
    committed: list[float] = []  # the budgets row's own running total
    stop = threading.Event()

    def sample() -> None:
        with crew.ledger() as ledger:
            while not stop.is_set():
                samples.append(held(ledger, ids))
                found = ledger.budget(batch)
                if found is not None:
                    committed.append(found.committed_usd)
                time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        crew.submit(jobs)
        # Kill a worker while slow requests are in flight at the faux.
        wait_until(
            lambda: any(crew.counted(j) for j in slow), 60, "a slow request reached the faux"
        )
        workers[0].kill()
        crew.start_worker()
        crew.expect_replies(crew.pairs(ids), timeout_s=150)
    finally:
        stop.set()
        sampler.join(timeout=30)

    figures: Figures = report(crew.check(crew.pairs(ids)))
    with crew.ledger() as ledger:
        calls = {j: ledger.calls(j) for j in ids}
        status = ledger.budget(batch)
        rows = {j: ledger.get_job(j) for j in ids}
    assert status is not None and status.limit_usd == budget
    booked = sum(charge(c) for cs in calls.values() for c in cs)
    print(
        f"budget ${budget:.9f}: booked+held ${booked:.9f}, committed ${status.committed_usd:.9f},"
        f" peak held ${max(samples, default=0):.9f} over {len(samples)} samples, peak"
        f" committed ${max(committed, default=0):.9f}; "
        f"outcomes {Counter(figures.outcomes.values())}"
    )
    # The promise: booked costs plus unknown reservations never pass the budget, at any time.
    assert booked <= budget + NOISE
    assert max(samples, default=0.0) <= budget + NOISE
    assert max(committed, default=0.0) <= budget + NOISE
    assert booked == pytest.approx(status.committed_usd, abs=NOISE)
    assert not any(c.status == "claimed" for cs in calls.values() for c in cs)
    # Mixed costs really were in play.
    bases = Counter(
        c.cost_basis or "unknown" for cs in calls.values() for c in cs if c.status != "not_sent"
    )
    assert bases["reported"] and bases["estimate"] and bases["unknown"], bases
    # Every job: answered, or escalated budget_exhausted (nothing sent), or interrupted.
    outcomes = figures.outcomes
    exhausted = sorted(j for j in ids if outcomes[j] == "escalation:budget_exhausted")
    assert exhausted and any(outcomes[j] == "result" for j in ids), outcomes
    for job_id in ids:
        outcome = outcomes[job_id]
        sent = [c for c in calls[job_id] if c.status != "not_sent"]
        if outcome == "escalation:budget_exhausted":
            assert not sent and crew.counted(job_id) == 0, job_id
            row = rows[job_id]
            assert row is not None and "exhausted" in (row.terminal_message or "")
        elif outcome == "escalation:decision_interrupted":
            assert [c.status for c in sent] == ["unknown"], (job_id, sent)
        elif outcome == "escalation:deadline_exceeded":
            # Its deadline passed before it could be sent (a loaded machine, a job waiting
            # for the killed worker's redelivery): safe only if nothing was sent. Seen once in
            # a fresh-clone CI run.
            assert not sent and crew.counted(job_id) == 0, (job_id, sent)
        else:
            assert outcome == "result", (job_id, outcome)

    # Raised, the budget lets `decisions budget resume` run those jobs, and nothing else.
    before = crew.calls()
    env = crew.env()
    raised = subprocess.run(
        [DECISIONS, "budget", "set", batch, f"{budget * 100:.9f}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert raised.returncode == 0, raised.stdout + raised.stderr
    resumed = subprocess.run(
        [DECISIONS, "budget", "resume", batch],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed {len(exhausted)} job(s)" in resumed.stdout

    def answered_again() -> bool:
        types = {(e.job_id, e.type) for e in crew.entries()}
        return all(
            (j, "result") in types or ((j, "escalation") in types and _finished(crew, j))
            for j in exhausted
        )

    wait_until(answered_again, 90, "the resumed jobs' new messages")
    after = crew.calls()
    for key, count in after.items():
        job_id = key.rsplit("/", 1)[0]
        expected = before.get(key, 0) + (1 if job_id in exhausted else 0)
        assert count == expected, (key, before.get(key), count)
    with crew.ledger() as ledger:
        final = ledger.budget(batch)
        assert final is not None and final.jobs_exhausted == 0
        assert held(ledger, ids) == pytest.approx(final.committed_usd, abs=NOISE)
    for w in crew.workers:
        w.close()


def _finished(crew: Any, job_id: str) -> bool:
    with crew.ledger() as ledger:
        row = ledger.get_job(job_id)
    return row is not None and row.finished and row.resumes == 1
