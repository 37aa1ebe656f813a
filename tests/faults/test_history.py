"""A generated workload of every job kind under faults, checked over its whole history.

A seeded mix (``HISTORY_SEED``, printed; sized by ``HISTORY_JOBS``) of decide, decide that
escalates, packed decide, sift, route, verify, and menus (a handler picked, a tool then a
handler, an unparseable reply that escalates) runs on two real worker processes (one with
its wall clock 30 s ahead, ``HISTORY_SKEW_S``, by ``tests/support/skewed_clock``) sharing a
private Redis that persists (AOF, fsync always: broker and reply streams), a fresh
PostgreSQL ledger and the session's faux server.
Meanwhile: each worker is ``kill -9``ed mid-run and restarted (one again just after a
handler ran), the Redis is killed and restarted, some jobs are submitted twice and some
broker messages are pushed twice. Once every job has replied, a few escalations are
resolved by two competing reviewers at once.
``tests.support.history.check_history`` then checks the whole history: each request at the
faux at most once, each handler run at most once, exactly one terminal message per job on
its own stream, each escalation resolved at most once, and every booked cost equal to the
faux's count times its price. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared import keys
from shared.errors import AlreadyResolved, EscalationNotFound
from shared.escalations import EscalationQueue, OpenEscalation
from tests.faults.conftest import FleetFactory
from tests.support.fleet import QUESTIONS, Fleet, Worker, decide_job, profile, wait_until
from tests.support.history import ResolveAttempt, check_history, collect
from tests.support.history_handlers import RUNS_ENV, read_runs
from tests.support.open_escalations import open_escalations
from tests.support.ownservers import OwnRedis, own_redis

pytestmark = pytest.mark.faults

SEED = int(os.environ.get("HISTORY_SEED", "0")) or random.randrange(1, 2**31)
JOBS = int(os.environ.get("HISTORY_JOBS", "48"))
SKEW_S = float(os.environ.get("HISTORY_SKEW_S", "30"))
SKEWED_PATH = str(Path(__file__).parents[1] / "support" / "skewed_clock")
KINDS = {
    "decide": 3,
    "decide-escalates": 2,
    "packed": 2,  # a group of three jobs about one state
    "sift": 2,
    "route": 2,
    "verify": 1,
    "menu-handler": 2,
    "menu-tool": 2,
    "menu-unparseable": 1,
}
HANDLER_KINDS = {"menu-handler", "menu-tool"}  # the kinds whose jobs run a handler
MENU_OPTIONS: list[dict[str, Any]] = [
    {"kind": "handler", "name": "refund", "handler": "hist_refund"},
    {"kind": "value", "name": "close", "value": {"status": "closed"}, "description": "Solved."},
]


def answer_for(questions: dict[str, Any]) -> dict[str, Any]:
    """A valid reviewer's answer to every question an escalation carries."""
    answer: dict[str, Any] = {}
    for qid, question in questions.items():
        if question.get("type") == "choice":
            answer[qid] = next(iter(question["criteria"]))
        elif question.get("type") == "score":
            answer[qid] = 0
        else:
            answer[qid] = True
    return answer


@pytest.fixture
def private_redis() -> Iterator[OwnRedis]:
    with own_redis() as server:
        yield server


def generate(rng: random.Random, prefix: str, n: int) -> tuple[list[dict[str, Any]], dict]:
    """``n`` kinds drawn from ``KINDS``: the jobs (packed ones marked), their kinds, and the
    faux chat script the menu jobs need."""
    jobs: list[dict[str, Any]] = []
    script: dict[str, Any] = {}
    names, weights = zip(*KINDS.items(), strict=True)
    for i in range(n):
        kind = rng.choices(names, weights)[0]
        job_id = f"{prefix}-{i:03d}-{kind}"
        if kind == "decide":
            jobs.append({**decide_job(job_id), "_kind": kind})
        elif kind == "decide-escalates":
            questions = {**QUESTIONS, "urgent": {**QUESTIONS["urgent"], "escalate_below": 0.999}}
            jobs.append({**decide_job(job_id, questions=questions), "_kind": kind})
        elif kind == "packed":
            state = {"subject": f"pack {job_id}", "body": "Where is my parcel?"}
            for member in range(3):
                jobs.append(
                    {
                        **decide_job(f"{job_id}.{member}", state=state, batch=f"{job_id}"),
                        "_kind": kind,
                        "_pack": True,
                    }
                )
        elif kind == "sift":
            job = {
                "id": job_id,
                "kind": "sift",
                "batch": prefix,
                "items": [f"{job_id}: message {k}" for k in range(rng.randint(2, 5))],
                "question": {"instructions": "Is this message spam?"},
                "state": "A shared mailbox of a small shop.",
            }
            jobs.append({**job, "_kind": kind})
        elif kind == "route":
            job = {
                "id": job_id,
                "kind": "route",
                "batch": prefix,
                "state": f"Ticket {job_id}: my payouts have failed for three days.",
                "routes": {"billing": "Payments, refunds", "technical": "Bugs, outages"},
                "unsure": "human",
            }
            jobs.append({**job, "_kind": kind})
        elif kind == "verify":
            job = {
                "id": job_id,
                "batch": prefix,
                "state": f"Ticket {job_id}: payouts failing",
                "questions": {"urgent": QUESTIONS["urgent"], "team": QUESTIONS["team"]},
                "verify": {"model": "typesafe/jev-1.14", "stakes": "high"},
            }
            jobs.append({**job, "_kind": kind})
        else:
            job = {
                "id": job_id,
                "kind": "menu",
                "batch": prefix,
                "prompt": f"Ticket {job_id}: the parcel never arrived. Pick one option.",
                "options": MENU_OPTIONS,
                "context": {"job": job_id},
            }
            refund = {"pick": "refund", "args": {"order_id": f"O-{i}", "amount": 2}}
            if kind == "menu-handler":
                script[f"{job_id}/pick.0"] = refund
            elif kind == "menu-tool":
                job["work"] = {"tools": ["hist_lookup"], "max_steps": 2}
                script[f"{job_id}/turn.0"] = {
                    "tool_calls": [{"name": "hist_lookup", "arguments": {"order_id": f"O-{i}"}}]
                }
                script[f"{job_id}/turn.1"] = refund
            else:
                script[f"{job_id}/pick.0"] = {"content": "I am not sure."}
                script[f"{job_id}/pick.1"] = {"content": "Still not sure."}
            jobs.append({**job, "_kind": kind})
    return jobs, script


class Run:
    """The fleet, the kills and what was submitted where."""

    def __init__(self, crew: Fleet, runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.crew = crew
        self.runs = runs
        self.monkeypatch = monkeypatch
        self.streams = [crew.stream, f"{crew.stream}-b"]
        self.own: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.kills = 0
        self.resubmitted = 0
        self.pushed_twice = 0

    def start(self, *, skewed: bool) -> Worker:
        with self.monkeypatch.context() as env:
            env.setenv(RUNS_ENV, str(self.runs))
            if skewed:
                env.setenv("HISTORY_CLOCK_SKEW_S", f"{SKEW_S:g}")
                # The skewed clock goes first; whatever the caller's PYTHONPATH holds (often
                # nothing: the project is installed) stays after it.
                path = [SKEWED_PATH, os.environ.get("PYTHONPATH", "")]
                env.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
            return self.crew.start_worker(wait=False)

    def submit(self, jobs: list[dict[str, Any]], rng: random.Random) -> None:
        by_stream: dict[tuple[str, bool], list[dict[str, Any]]] = {}
        for job in jobs:
            stream = self.own.setdefault(job["id"], rng.choice(self.streams))
            self.kinds[job["id"]] = job["_kind"]
            clean = {k: v for k, v in job.items() if not k.startswith("_")}
            by_stream.setdefault((stream, bool(job.get("_pack"))), []).append(clean)
        for (stream, pack), batch in by_stream.items():
            report = self.crew.submit(batch, chunk_size=4, stream=stream, pack=pack)
            assert not report.rejected, report.rejected

    def kill(self, worker: Worker) -> None:
        worker.kill()
        self.kills += 1

    def push_twice(self, n: int) -> None:
        """Push ``n`` queued broker messages a second time (a duplicated delivery)."""
        broker = self.crew.broker
        for raw in broker.lrange(keys.CELERY_QUEUE, 0, n - 1):
            broker.lpush(keys.CELERY_QUEUE, raw)
            self.pushed_twice += 1

    def requests(self) -> int:
        return sum(httpx.get(f"{self.crew.faux_url}/_faux/calls", timeout=10).json().values())


def review(
    queue: EscalationQueue,
    item: OpenEscalation,
    reviewer: str,
    start: threading.Barrier,
    attempts: list[ResolveAttempt],
) -> None:
    """One reviewer: take the entry and resolve it, as soon as the other one starts too."""
    answer = answer_for(item.message.context.get("questions", {}))
    start.wait()
    try:
        queue.claim_entry(item.entry_id, reviewer)
        queue.resolve(item.entry_id, reviewer, answer)
        resolved = True
    except (AlreadyResolved, EscalationNotFound):
        resolved = False
    attempts.append(ResolveAttempt(item.message.job_id, reviewer, resolved))  # list: atomic


def resolve_competing(r: redis.Redis, own: dict[str, str], n: int) -> list[ResolveAttempt]:
    """Two reviewers race to resolve each of ``n`` open decision escalations of this run."""
    queue = EscalationQueue(r, claim_idle_s=0)  # either may take it from the other at once
    items = [
        e for e in open_escalations(queue) if e.message.job_id in own and e.message.kind != "menu"
    ]
    attempts: list[ResolveAttempt] = []
    for item in items[:n]:
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=review, args=(queue, item, who, start, attempts))
            for who in ("ana", "bo")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    return attempts


@pytest.mark.timeout(300)
def test_a_generated_workload_under_faults_keeps_every_promise_over_its_history(
    private_redis: OwnRedis,  # first: set up before the fleet, so stopped after its workers
    new_fleet: FleetFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    print(f"history: HISTORY_SEED={SEED} HISTORY_JOBS={JOBS}")  # shown with a failure
    rng = random.Random(SEED)
    r = redis.Redis.from_url(private_redis.url())
    # Deadlines long enough that a restart's start-up (a few seconds on a loaded machine) does
    # not turn most of the run into deadline_exceeded; redelivery comes after twice that.
    settings = profile(10, handlers="tests.support.history_handlers", worker_concurrency="2")
    crew = new_fleet("history", settings, broker_url=private_redis.url(), r=r)
    faux = crew.faux_url
    httpx.post(f"{faux}/_faux/reset", timeout=10).raise_for_status()  # this run's counts only
    jobs, script = generate(rng, "hist", JOBS)
    httpx.put(f"{faux}/_faux/chat", json={"by_call": script}, timeout=10).raise_for_status()
    crew.slow(300)  # requests in flight long enough for the kills to land inside them
    run = Run(crew, tmp_path / "handler-runs.jsonl", monkeypatch)
    plain, skewed = run.start(skewed=False), run.start(skewed=True)
    plain.wait_ready()
    skewed.wait_ready()
    started = time.monotonic()

    half = len(jobs) // 2
    run.submit(jobs[:half], rng)
    wait_until(lambda: run.requests() >= 4, 60, "requests in flight")
    run.kill(plain)  # kill -9 mid-run, then a replacement
    plain = run.start(skewed=False)
    private_redis.kill()  # the broker and streams Redis goes away, and comes back (AOF)
    time.sleep(1)
    private_redis.start()
    plain.wait_ready()
    run.submit(jobs[half:], rng)
    run.push_twice(3)
    again = rng.sample(jobs[:half], k=min(5, half))
    run.submit(again, rng)  # the same jobs, same content, same streams: submitted twice
    run.resubmitted = len(again)
    before = run.requests()
    wait_until(lambda: run.requests() >= before + 3, 60, "more requests in flight")
    assert f"datetime.now() runs {SKEW_S:+g} s off" in skewed.text()
    run.kill(skewed)
    skewed = run.start(skewed=True)
    # And once more just after a handler ran: its job's record is what is at stake now.
    # Only if a job that runs handlers is still open: by now each may have finished, or ended
    # as decision_interrupted (its call cut by a kill), and then no handler runs again.
    ran = len(read_runs(run.runs))
    runners = [(j, s) for j, s in run.own.items() if run.kinds[j] in HANDLER_KINDS]
    wait_until(
        lambda: len(read_runs(run.runs)) > ran or not crew.wait_for(runners, 0),
        90,
        "a handler run, or every job that runs handlers answered",
    )
    if len(read_runs(run.runs)) > ran:
        run.kill(plain)
        plain = run.start(skewed=False)
    skewed.wait_ready()
    plain.wait_ready()

    pairs = list(run.own.items())
    missing = crew.wait_for(
        [(j, s) for j, s in pairs], float(settings["visibility_timeout_s"]) + 60
    )
    if missing:  # the product's own command, as an operator would run it
        crew.reap()
        missing = crew.wait_for([(j, s) for j, s in pairs], 15)
    attempts = resolve_competing(r, run.own, 4)
    history = collect(
        run.own,
        r=r,
        faux_url=faux,
        ledger_url=crew.ledger_url,
        handler_runs=read_runs(run.runs),
        resolve_attempts=attempts,
    )
    took = time.monotonic() - started
    print(
        f"\nhistory (seed {SEED}, {took:.0f} s): kills={run.kills} redis_restarts=1 "
        f"resubmitted={run.resubmitted} pushed_twice={run.pushed_twice} "
        f"resolve_attempts={len(attempts)} silent_after_wait={len(missing)}"
    )
    calls = Counter(
        f"{b.provider}/{b.status}/{'null' if b.cost_usd is None else 'cost'}"
        for b in history.bookings
    )
    print(f"history: ledger calls by provider/status/cost {dict(sorted(calls.items()))}")
    figures = check_history(history, run.kinds)
    print(f"history: {figures.line()}")
    assert run.kills >= 2
    assert figures.terminal_messages == len(run.own)
    assert figures.handler_runs >= 1 and figures.resolutions >= 1
    assert figures.priced_requests >= 1  # the cost property compared real bookings
