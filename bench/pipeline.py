"""``pipeline``: submit to terminal message through a real ``decisions worker`` process.

Each job's submit time is taken when its chunk was published (the client's progress
callback), its reply time is the Redis timestamp in its reply's stream entry id (the moment
of the XADD, read off the server, so the reader's own delay does not count).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.workload import decide_jobs
from shared import keys
from shared.client import Client

__all__ = ["PipelineRun", "Replies", "paced_run", "saturated_run"]


@dataclass
class PipelineRun:
    decisions: int
    elapsed_s: float
    #: Per job: reply time minus submit time, ms.
    latencies_ms: list[float] = field(default_factory=list)
    types: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.decisions / self.elapsed_s


class Replies:
    """Reads the reply stream on a thread: each job's terminal entry time (ms) and type."""

    def __init__(self, r: redis.Redis, stream: str, expected: int) -> None:
        self._r = r
        self._stream = keys.reply_stream(stream)
        self._expected = expected
        self.at_ms: dict[str, float] = {}
        self.types: dict[str, int] = {}
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        last = "0-0"
        while not self._stop.is_set() and len(self.at_ms) < self._expected:
            answer: Any = self._r.xread({self._stream: last}, count=2000, block=200)
            for _name, entries in answer or []:
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    job_id = fields[b"job_id"].decode()
                    if job_id not in self.at_ms:
                        self.at_ms[job_id] = float(last.split("-")[0])
                        kind = fields[b"type"].decode()
                        self.types[kind] = self.types.get(kind, 0) + 1
        self.done.set()

    def wait(self, timeout_s: float) -> None:
        if not self.done.wait(timeout_s):
            self._stop.set()
            raise TimeoutError(
                f"{self._expected - len(self.at_ms)} of {self._expected} replies missing "
                f"after {timeout_s:.0f} s on {self._stream}"
            )


def _run(
    client: Client,
    r: redis.Redis,
    jobs: list[dict[str, Any]],
    stream: str,
    submit: Callable[[Callable[[list[str]], None]], None],
    timeout_s: float,
) -> PipelineRun:
    replies = Replies(r, stream, len(jobs))
    submitted_at: dict[str, float] = {}

    def stamp(ids: list[str]) -> None:
        now_ms = time.time() * 1000
        for job_id in ids:
            submitted_at[job_id] = now_ms

    started_ms = time.time() * 1000
    submit(stamp)
    replies.wait(timeout_s)
    last_ms = max(replies.at_ms.values())
    latencies = [replies.at_ms[j] - submitted_at[j] for j in submitted_at]
    return PipelineRun(
        len(jobs), max(last_ms - started_ms, 1.0) / 1000, sorted(latencies), replies.types
    )


def saturated_run(
    client: Client,
    r: redis.Redis,
    prefix: str,
    n: int,
    *,
    chunk_size: int,
    timeout_s: float = 300,
) -> PipelineRun:
    """All ``n`` jobs submitted at once: the maximum rate."""
    jobs = decide_jobs(prefix, n)
    stream = f"bench:{prefix}"

    def submit(stamp: Callable[[list[str]], None]) -> None:
        sent = 0

        def progress(count: int) -> None:
            nonlocal sent
            stamp([j["id"] for j in jobs[sent : sent + count]])
            sent += count

        client.submit_batch(jobs, reply_to=stream, chunk_size=chunk_size, on_progress=progress)

    return _run(client, r, jobs, stream, submit, timeout_s)


def paced_run(
    client: Client,
    r: redis.Redis,
    prefix: str,
    *,
    rate: float,
    duration_s: float,
    tick_s: float = 0.01,
    timeout_s: float = 120,
) -> PipelineRun:
    """Jobs at ``rate`` a second for ``duration_s``: each tick's jobs go as one message."""
    n = max(1, int(rate * duration_s))
    jobs = decide_jobs(prefix, n)
    stream = f"bench:{prefix}"

    def submit(stamp: Callable[[list[str]], None]) -> None:
        started = time.monotonic()
        sent = 0
        while sent < n:
            due = min(n, int((time.monotonic() - started) * rate) + 1)
            if due > sent:
                batch = jobs[sent:due]
                ids = [j["id"] for j in batch]

                def progress(_count: int, ids: list[str] = ids) -> None:
                    stamp(ids)

                client.submit_batch(
                    batch, reply_to=stream, chunk_size=len(batch), on_progress=progress
                )
                sent = due
            time.sleep(tick_s)

    return _run(client, r, jobs, stream, submit, timeout_s)
