"""``open loop``: single-job messages offered at a fixed rate for a fixed time.

The commonest producer: each job its own ``Client.submit`` (its own Celery message) as events
arrive, at a rate that does not wait for the worker. Offered is what the producer managed to
submit per second (it says so when it could not keep up); sustained is jobs answered per
second from the first submit to the last reply less one provider latency; added latency is
a job's reply time (its stream entry id: Redis's clock) minus its submit time minus the
provider latency.

``direct_open_loop`` offers the same decisions at the same rate straight to the faux with the
worker's HTTP client, keeping at most ``in_flight`` requests out (no queue, no ledger): the
ceiling for the same in-flight limit.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.direct import prepared_requests
from bench.pipeline import Replies
from bench.workload import decide_jobs
from shared.client import Client
from worker.http.connection_pool import drop_read_stream, sharded_client

__all__ = ["OPEN_DIRECT", "OPEN_THREADS", "OPEN_WORKER", "OpenLoopRun", "direct_open_loop",
           "open_loop", "redis_calls"]

#: The open-loop scenarios' names in the table.
OPEN_WORKER = "open loop: decisions worker"
OPEN_THREADS = "open loop: --pool threads"
OPEN_DIRECT = "open loop: direct"


@dataclass
class OpenLoopRun:
    offered: int
    offer_s: float
    #: First submit to last reply, less one provider latency.
    span_s: float
    latency_ms: float
    #: Per job: reply minus submit minus the provider latency, ms (sorted).
    added_ms: list[float] = field(default_factory=list)
    types: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0

    @property
    def offered_rate(self) -> float:
        return self.offered / self.offer_s

    @property
    def sustained_rate(self) -> float:
        return self.offered / max(self.span_s, self.offer_s)

    def added(self, q: float) -> float:
        if not self.added_ms:
            return float("nan")
        return self.added_ms[min(len(self.added_ms) - 1, int(q * len(self.added_ms)))]


def redis_calls(r: redis.Redis) -> dict[str, int]:
    """Redis's own count of calls per command so far (``INFO commandstats``): the round
    trips of a run, the producer's and the reply reader's included, by difference."""
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _pace(rate: float, n: int, send: Any) -> float:
    """Call ``send(i)`` for i in range(n) at ``rate`` a second (catching up when late);
    returns the seconds the offering took."""
    started = time.monotonic()
    for i in range(n):
        due = started + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        send(i)
    return time.monotonic() - started


def open_loop(
    client: Client,
    r: redis.Redis,
    prefix: str,
    *,
    rate: float,
    duration_s: float,
    latency_ms: float,
    timeout_s: float = 600,
) -> OpenLoopRun:
    """``rate`` single-job messages a second for ``duration_s`` through the worker."""
    n = max(1, int(rate * duration_s))
    jobs = decide_jobs(prefix, n)
    stream = f"bench:{prefix}"
    replies = Replies(r, stream, n)
    submitted: list[float] = [0.0] * n

    def send(i: int) -> None:
        submitted[i] = time.time() * 1000
        client.submit(jobs[i], reply_to=stream)

    first_ms = time.time() * 1000
    offer_s = _pace(rate, n, send)
    replies.wait(timeout_s)
    last_ms = max(replies.at_ms.values())
    index = {job["id"]: i for i, job in enumerate(jobs)}
    added = sorted(at - submitted[index[j]] - latency_ms for j, at in replies.at_ms.items())
    span_s = (last_ms - first_ms - latency_ms) / 1000
    return OpenLoopRun(n, offer_s, span_s, latency_ms, added, replies.types)


async def _direct(
    requests: list[tuple[str, bytes, dict[str, str]]], rate: float, in_flight: int
) -> tuple[float, float, list[float], list[float]]:
    """(offer seconds, span seconds, submit times, added-latency-less-nothing answers)."""
    n = len(requests)
    slots = asyncio.Semaphore(in_flight)
    sent_at = [0.0] * n
    answered_at = [0.0] * n
    async with sharded_client(max_connections=in_flight, timeout=60) as client:

        async def one(i: int) -> None:
            url, body, headers = requests[i]
            async with slots:
                response = await client.post(url, content=body, headers=headers)
                drop_read_stream(response)  # as the worker does: no cyclic garbage
            if response.status_code != 200:
                raise RuntimeError(f"the faux answered {response.status_code}")
            answered_at[i] = time.monotonic()

        started = time.monotonic()
        tasks = []
        for i in range(n):
            wait = started + i / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            sent_at[i] = time.monotonic()
            tasks.append(asyncio.ensure_future(one(i)))
        offer_s = time.monotonic() - started
        await asyncio.gather(*tasks)
        return offer_s, max(answered_at) - started, sent_at, answered_at


def direct_open_loop(
    faux_url: str, prefix: str, *, rate: float, duration_s: float, latency_ms: float,
    in_flight: int,
) -> OpenLoopRun:
    n = max(1, int(rate * duration_s))
    requests = prepared_requests(faux_url, decide_jobs(prefix, n))
    cpu0 = time.process_time()
    offer_s, span_s, sent, answered = asyncio.run(_direct(requests, rate, in_flight))
    cpu = time.process_time() - cpu0
    added = sorted((a - s) * 1000 - latency_ms for s, a in zip(sent, answered, strict=True))
    return OpenLoopRun(
        n, offer_s, span_s - latency_ms / 1000, latency_ms, added, {"answered": n}, cpu
    )
