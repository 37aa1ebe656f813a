"""A small real fleet for fault scenarios: ``decisions worker`` processes sharing one broker,
one PostgreSQL ledger and one faux server, with handles to kill, stop and restart them.

Settings come from ``profile``: a deadline ceiling of a few seconds, and the visibility
timeout the worker's own start-up check accepts for it (twice the task hard limit), so that
a message whose worker died is delivered again within seconds, not an hour, and a message the
broker lost is republished by a worker's reaper (``worker.recovery.intake``) as soon after. Nothing
here resubmits a job: no loss is the product's own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from shared import keys
from shared.client import Client, SubmitReport
from shared.settings import Settings
from shared.streams import read_stream
from tests.support.checker import TERMINAL, Figures, check, faux_calls
from tests.support.processes import DECISIONS, decisions_env, wait_log
from worker.ledger import Ledger, LedgerStatus

__all__ = [
    "QUESTIONS",
    "Fleet",
    "Worker",
    "decide_job",
    "fleet",
    "profile",
    "unique",
    "wait_until",
]

QUESTIONS: dict[str, Any] = {
    "urgent": {"type": "noul", "instructions": "Does this ticket convey urgency?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle it?",
        "criteria": {"billing": "Payments and refunds", "sales": None, "technical": None},
    },
    "mood": {
        "type": "score",
        "instructions": "How frustrated is the customer?",
        "criteria": ["calm", "annoyed", "angry"],
    },
}


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` (a log line, a count) until it holds; TimeoutError naming ``what``."""
    until = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > until:
            raise TimeoutError(f"{what}: not after {timeout_s} s")
        time.sleep(0.05)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def decide_job(job_id: str, **extra: Any) -> dict[str, Any]:
    """A valid decide job for the faux provider (no ``escalate_below``: answers are results)."""
    job: dict[str, Any] = {
        "id": job_id,
        "kind": "decide",
        "batch": job_id.rsplit("-", 1)[0],
        "state": {"subject": f"ticket {job_id}", "body": "The invoice is wrong, please help."},
        "questions": QUESTIONS,
        "metadata": {"n": job_id},
    }
    job.update(extra)
    return job


def profile(
    ceiling_s: float, *, margin_s: float = 0.5, slack_s: float = 1.0, **more: str
) -> dict[str, str]:
    """Worker settings for a deadline ceiling, with the shortest visibility timeout allowed."""
    soft = ceiling_s + margin_s + slack_s
    hard = soft + slack_s / 2
    settings = {
        "default_timeout_s": f"{ceiling_s:g}",
        "deadline_ceiling_s": f"{ceiling_s:g}",
        "lease_margin_s": f"{margin_s:g}",
        "time_limit_slack_s": f"{slack_s:g}",
        "visibility_timeout_s": f"{2 * hard:g}",
        "unacked_restore_interval_s": "1",
        "unacked_restore_throttle": "1",
        # The reaper republishes what the broker lost (worker.recovery.intake): no producer
        # resubmits.
        "reaper_interval_s": "2",
        # ... 5 s after a message the broker holds nowhere was submitted (not 60 s).
        "intake_grace_s": "5",
        # The classic pool, as the suite was written for (pool processes to kill); the loop
        # pool, decisions worker's default, runs the key scenarios in test_loop_pool.py.
        "worker_pool": "prefork",
        "worker_concurrency": "2",
        "log_level": "INFO",
    }
    settings.update(more)
    return settings


class Worker:
    """One ``decisions worker`` (its own process group: the parent and its pool)."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout_s: float = 90) -> Worker:
        wait_log(self.log, "ready.", self.proc, timeout_s)
        return self

    def wait_exit(self, timeout_s: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # What the worker did meanwhile is the only clue to why it did not exit: the
            # bare TimeoutExpired of a CI run said nothing.
            raise AssertionError(
                f"the worker did not exit within {timeout_s:g} s; its log ends:\n"
                + self.text()[-3000:]
            ) from None

    def signal(self, sig: int, *, group: bool = False) -> None:
        if not self.alive():
            return
        if group:
            os.killpg(self.pid, sig)
        else:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """``kill -9`` of the whole worker: parent and pool, nothing runs to its end."""
        self.signal(signal.SIGKILL, group=True)
        self.proc.wait(timeout=30)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.alive():
            # Warm shutdown first: a worker that dies here would leave claims to expire.
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        # The pool of a killed parent may linger a moment; leave nothing behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


@dataclass
class Fleet:
    name: str
    broker_url: str
    ledger_url: str
    faux_url: str
    logs: Path
    settings: dict[str, str]
    r: redis.Redis
    #: The Redis of the reply and escalation streams (``r``), when not the broker's.
    streams_url: str | None = None
    workers: list[Worker] = field(default_factory=list)
    #: Every job submitted through ``submit``, by id.
    submitted: dict[str, Any] = field(default_factory=dict)

    @property
    def broker(self) -> redis.Redis:
        """The broker's Redis (kombu's queue and unacked bookkeeping)."""
        if self.streams_url is None:
            return self.r
        return redis.Redis.from_url(self.broker_url)

    @property
    def stream(self) -> str:
        return f"faults:{self.name}:replies"

    def env(self, **extra: str) -> dict[str, str]:
        return decisions_env(
            broker_url=self.broker_url,
            redis_url=self.streams_url or self.broker_url,
            ledger_url=self.ledger_url,
            faux_url=self.faux_url,
            **{**self.settings, **extra},
        )

    # --- workers -----------------------------------------------------------------------
    def start_worker(self, *, wait: bool = True, **settings: str) -> Worker:
        """Start a worker; ``fault_point=...`` (and ``fault_job``) arm a self-kill in it."""
        name = f"w{len(self.workers) + 1}"
        log = self.logs / f"{self.name}-{name}.log"
        out = log.open("wb")
        proc = subprocess.Popen(
            # Mingle and gossip only slow start-up here: these workers share no revokes.
            [DECISIONS, "worker", f"--hostname={name}-{self.name}@%h",
             "--without-mingle", "--without-gossip"],
            env=self.env(**settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    # --- producing and reading -----------------------------------------------------------
    def producer_settings(self) -> Settings:
        return Settings(
            broker_url=self.broker_url,
            redis_url=self.streams_url or self.broker_url,
            ledger_url=self.ledger_url,
            deadline_ceiling_s=float(self.settings["deadline_ceiling_s"]),
            default_timeout_s=float(self.settings["default_timeout_s"]),
        )

    def client(self) -> Client:
        return Client(self.producer_settings(), redis_client=self.r)

    def jobs(self, n: int, prefix: str = "job", **extra: Any) -> list[dict[str, Any]]:
        return [decide_job(f"{self.name}-{prefix}-{i:04d}", **extra) for i in range(n)]

    def submit(
        self,
        jobs: Iterable[Any],
        *,
        chunk_size: int = 1,
        stream: str | None = None,
        pack: bool = False,
    ) -> SubmitReport:
        batch = list(jobs)
        for job in batch:
            if isinstance(job, dict) and isinstance(job.get("id"), str):
                self.submitted[job["id"]] = job
        client = self.client()
        return client.submit_batch(
            batch, reply_to=stream or self.stream, chunk_size=chunk_size, pack=pack
        )

    def pairs(self, job_ids: Iterable[str], stream: str | None = None) -> list[tuple[str, str]]:
        return [(job_id, stream or self.stream) for job_id in job_ids]

    def wait_for(self, pairs: Iterable[tuple[str, str]], timeout_s: float = 90) -> set[str]:
        """Wait until every job has a terminal entry on its stream; returns those still missing."""
        by_stream: dict[str, set[str]] = {}
        for job_id, stream in pairs:
            by_stream.setdefault(stream, set()).add(job_id)
        until = time.monotonic() + timeout_s
        last = dict.fromkeys(by_stream, "0-0")
        while True:
            for stream, waiting in by_stream.items():
                answer: Any = self.r.xread({keys.reply_stream(stream): last[stream]}, block=200)
                for _name, entries in answer or []:
                    for entry_id, fields in entries:
                        last[stream] = entry_id.decode()
                        if fields.get(b"type", b"").decode() in TERMINAL:
                            waiting.discard(fields[b"job_id"].decode())
            missing = set().union(*by_stream.values())
            if not missing or time.monotonic() > until:
                return missing

    def expect_replies(self, pairs: Iterable[tuple[str, str]], timeout_s: float = 90) -> None:
        """``wait_for``, failing with where the silent jobs are if one never replied.

        A job whose message the broker lost is the product's to recover (its intake record,
        republished by a worker's reaper after the visibility timeout): ``timeout_s`` must
        leave time for that."""
        wanted = list(pairs)
        missing = self.wait_for(wanted, timeout_s)
        assert not missing, (
            f"{len(missing)} job(s) without a reply after {timeout_s} s: {sorted(missing)[:5]}; "
            f"where: {self.where_are(sorted(missing)[:5])}; broker: {self.broker_state()}"
        )

    def broker_state(self) -> dict[str, object]:
        """The Redis transport's bookkeeping: queued, delivered-unacked, the sweep's mutex."""
        return {
            "queued": self.broker.llen(keys.CELERY_QUEUE),
            "unacked": self.broker.hlen("unacked"),
            "unacked_index": self.broker.zrange("unacked_index", 0, -1, withscores=True),
            "unacked_mutex_ttl": self.broker.ttl("unacked_mutex"),
            "now": time.time(),
        }

    def where_are(self, job_ids: Collection[str]) -> dict[str, str]:
        """Where the broker holds each job's message: ``queued``, ``unacked`` or ``nowhere``."""
        held = [("queued", m) for m in self.broker.lrange(keys.CELERY_QUEUE, 0, -1)]
        held += [("unacked", m) for m in self.broker.hvals("unacked")]
        found: dict[str, str] = {}
        for place, stored in held:
            text = _message_body(stored)
            for job_id in job_ids:
                if f'"{job_id}"' in text:
                    found[job_id] = place
        return {job_id: found.get(job_id, "nowhere") for job_id in sorted(job_ids)}

    def entries(self, stream: str | None = None) -> list[Any]:
        return list(read_stream(self.r, stream or self.stream))

    def reap(self) -> str:
        """``decisions ledger reap``: book expired claims unknown and escalate their jobs."""
        done = subprocess.run(
            [DECISIONS, "ledger", "reap"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def republished(self) -> list[str]:
        """Jobs the workers' reapers republished because the broker had lost their message
        (their ``intake.republished`` log lines)."""
        found: set[str] = set()
        for worker in self.workers:
            for line in worker.text().splitlines():
                if "intake.republished" not in line:
                    continue
                with contextlib.suppress(ValueError):
                    found.update(json.loads(line).get("job_ids") or [])
        return sorted(found)

    def check(self, pairs: Iterable[tuple[str, str]], *, reap: bool = True) -> Figures:
        pairs = list(pairs)
        figures = check(
            pairs,
            r=self.r,
            faux_url=self.faux_url,
            ledger_url=self.ledger_url,
            reap=self.reap if reap else None,
        )
        wanted = {job_id for job_id, _ in pairs}
        lost = [j for j in self.republished() if j in wanted]
        figures.broker_lost, figures.broker_lost_ids = len(lost), lost
        return figures

    def ledger(self) -> Ledger:
        return Ledger(self.ledger_url)

    def ledger_figures(self) -> LedgerStatus:
        with self.ledger() as ledger:
            return ledger.status()

    # --- the faux server ---------------------------------------------------------------
    def calls(self) -> dict[str, int]:
        return faux_calls(self.faux_url)

    def counted(self, job_id: str, step: str = "decide") -> int:
        return self.calls().get(f"{job_id}/{step}", 0)

    def wait_counted(self, job_ids: Iterable[str], timeout_s: float = 60) -> None:
        """Wait until the faux has received (read) a request for every one of ``job_ids``."""
        wanted = {f"{j}/decide" for j in job_ids}
        until = time.monotonic() + timeout_s
        while not wanted <= set(self.calls()):
            if time.monotonic() > until:
                raise TimeoutError(f"the faux never received {sorted(wanted - set(self.calls()))}")
            time.sleep(0.05)

    def two_in_flight(
        self, jobs: list[dict[str, Any]], latency_ms: float
    ) -> tuple[Worker, SubmitReport, list[str]]:
        """A worker of two slots given ``jobs`` (one a message), the first two answered after
        ``latency_ms``: it returns once the faux has read both (their requests in flight).
        The worker, what was submitted, and the two job ids."""
        in_flight = [j["id"] for j in jobs[:2]]
        self.slow(latency_ms, in_flight)
        worker = self.start_worker(worker_concurrency="2")
        submitted = self.submit(jobs)
        self.wait_counted(in_flight)
        return worker, submitted, in_flight

    def slow(self, latency_ms: float, job_ids: Iterable[str] | None = None) -> None:
        """Answer ``job_ids`` (every request if None) after ``latency_ms``."""
        if job_ids is None:
            self._patch_faux({"latency_ms": latency_ms})
            return
        self.misbehave(job_ids, latency_ms=latency_ms)

    def misbehave(self, job_ids: Iterable[str], **behaviour: Any) -> None:
        """The faux treats the decide requests of ``job_ids`` so (``FauxBehaviour`` fields:
        ``mode="drop_after_read"`` loses their outcome, ``latency_ms`` slows them)."""
        current = httpx.get(f"{self.faux_url}/_faux/behaviour", timeout=10).json()
        overrides: dict[str, Any] = dict(current.get("overrides") or {})
        for job_id in job_ids:
            overrides[f"{job_id}/decide"] = dict(behaviour)
        self._patch_faux({"overrides": overrides})

    def _patch_faux(self, changes: Mapping[str, Any]) -> None:
        answer = httpx.patch(
            f"{self.faux_url}/_faux/behaviour", content=json.dumps(changes), timeout=10
        )
        answer.raise_for_status()


def _message_body(stored: bytes) -> str:
    """The body of a message as kombu's Redis transport stores it (queued or unacked)."""
    envelope = json.loads(stored)
    if isinstance(envelope, list):  # unacked: [message, exchange, routing key]
        envelope = envelope[0]
    body = envelope.get("body", "")
    if envelope.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body).decode(errors="replace")
    return str(body)


@contextmanager
def fleet(
    name: str,
    *,
    r: redis.Redis,
    broker_url: str,
    ledger_url: str,
    faux_url: str,
    logs: Path,
    settings: Mapping[str, str],
    streams_url: str | None = None,
) -> Iterator[Fleet]:
    """A fleet with a migrated ledger and no workers yet; every worker is stopped at the end."""
    with Ledger(ledger_url) as ledger:
        ledger.migrate()
    httpx.put(f"{faux_url}/_faux/behaviour", content="{}", timeout=10).raise_for_status()
    crew = Fleet(name, broker_url, ledger_url, faux_url, logs, dict(settings), r, streams_url)
    try:
        yield crew
    finally:
        crew.close()
        httpx.put(f"{faux_url}/_faux/behaviour", content="{}", timeout=10)
