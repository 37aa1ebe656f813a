"""``direct``: the same decisions straight to the faux with httpx, no queue, no ledger.

The bodies are the exact bytes the worker's faux provider prepares for those jobs; they go
through the worker's own HTTP client (``worker.http.connection_pool``) at the pipeline's
concurrency.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.settings import Settings
from worker.http.connection_pool import drop_read_stream, sharded_client
from worker.providers import DecisionRequest, ProviderRegistry

__all__ = ["DirectRun", "prepared_requests", "run_direct"]


@dataclass(frozen=True)
class DirectRun:
    decisions: int
    elapsed_s: float
    cpu_s: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.decisions / self.elapsed_s


def prepared_requests(
    faux_url: str, jobs: list[dict[str, Any]]
) -> list[tuple[str, bytes, dict[str, str]]]:
    registry = ProviderRegistry.from_settings(Settings(faux_url=faux_url))
    provider = registry.get("faux")
    out = []
    for raw in jobs:
        job = parse_job({**raw, "reply_to": "bench"})
        assert isinstance(job, DecideJob)
        prepared = provider.prepare(
            DecisionRequest(
                state=job.state,
                questions={qid: q.wire() for qid, q in job.questions.items()},
                model=job.model,
                call_key=f"{job.id}/decide",
            )
        )
        headers = {
            **prepared.headers,
            "authorization": "Bearer faux-no-secret",
            "content-type": "application/json",
        }
        out.append((prepared.url, prepared.body, headers))
    return out


async def _run(
    requests: list[tuple[str, bytes, dict[str, str]]], concurrency: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    queue = iter(requests)
    async with sharded_client(max_connections=concurrency, timeout=60) as client:

        async def lane() -> None:
            for url, body, headers in queue:
                sent = time.perf_counter()
                response = await client.post(url, content=body, headers=headers)
                drop_read_stream(response)  # as the worker does: no cyclic garbage
                if response.status_code != 200:
                    raise RuntimeError(f"the faux answered {response.status_code}")
                latencies.append((time.perf_counter() - sent) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


def run_direct(
    faux_url: str, jobs: list[dict[str, Any]], concurrency: int, warmup: int
) -> DirectRun:
    requests = prepared_requests(faux_url, jobs)
    asyncio.run(_run(requests[:warmup], concurrency))
    cpu0 = time.process_time()
    elapsed, latencies = asyncio.run(_run(requests[warmup:], concurrency))
    return DirectRun(len(requests) - warmup, elapsed, time.process_time() - cpu0, latencies)
