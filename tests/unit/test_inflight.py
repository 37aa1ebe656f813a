"""Slots per provider (``worker.process.inflight``): jobs running and requests in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.errors import NotAdmitted
from worker.process.inflight import JobGate, LocalLimiter, job_provider


def test_job_provider_reads_the_raw_job_without_parsing_it() -> None:
    assert job_provider({"provider": "openrouter"}) == "openrouter"
    assert job_provider({"runtime": {"provider": "vllm"}}) == "vllm"
    assert job_provider({"provider": 3}) == ""
    assert job_provider("not a job") == ""


async def _peak(gate: JobGate, raws: list[Any], hold: asyncio.Event) -> dict[str, int]:
    running: dict[str, int] = {}
    peak: dict[str, int] = {}

    async def one(raw: Any) -> None:
        async with gate.slot(raw):
            key = job_provider(raw)
            running[key] = running.get(key, 0) + 1
            peak[key] = max(peak.get(key, 0), running[key])
            await hold.wait()
            running[key] -= 1

    tasks = [asyncio.ensure_future(one(raw)) for raw in raws]
    await asyncio.sleep(0.01)
    hold.set()
    await asyncio.gather(*tasks)
    return peak


def test_the_gate_bounds_jobs_per_provider_and_a_full_provider_blocks_no_other() -> None:
    async def scenario() -> None:
        gate = JobGate(3)
        slow = [{"provider": "slow"}] * 10
        other = [{"provider": "other"}] * 2
        hold = asyncio.Event()
        # "slow" has 10 jobs waiting for 3 slots; "other"'s two start at once meanwhile.
        started: list[str] = []

        async def quick(raw: Any) -> None:
            async with gate.slot(raw):
                started.append("other")

        peak_task = asyncio.ensure_future(_peak(gate, slow, hold))
        await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*(quick(r) for r in other)), 1)
        assert started == ["other", "other"]
        assert (await peak_task) == {"slow": 3}

    asyncio.run(scenario())


def test_a_closed_gate_admits_nothing_and_lets_the_running_finish() -> None:
    async def scenario() -> None:
        gate = JobGate(1)
        release = asyncio.Event()
        finished: list[str] = []

        async def first() -> None:
            async with gate.slot({}):
                await release.wait()
                finished.append("first")

        async def waiting() -> None:
            async with gate.slot({}):
                finished.append("never")

        running = asyncio.ensure_future(first())
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(waiting())
        await asyncio.sleep(0)
        gate.close()
        with pytest.raises(NotAdmitted):
            await queued
        with pytest.raises(NotAdmitted):
            async with gate.slot({}):
                pass
        release.set()
        await running
        assert finished == ["first"]

    asyncio.run(scenario())


def test_the_local_limiter_bounds_requests_per_provider_then_asks_the_fleet() -> None:
    class Fleet:
        def __init__(self) -> None:
            self.asked: list[str] = []
            self.released = 0

        async def acquire(self, provider: str) -> object:
            self.asked.append(provider)
            return provider

        async def release(self, token: object) -> None:
            self.released += 1

        async def note_retry_after(self, provider: str, seconds: float) -> None:
            return None

    async def scenario() -> None:
        fleet = Fleet()
        limiter = LocalLimiter(2, fleet)
        a1 = await limiter.acquire("a")
        await limiter.acquire("a")
        third = asyncio.ensure_future(limiter.acquire("a"))
        b = await asyncio.wait_for(limiter.acquire("b"), 1)  # "a" full: "b" goes on
        await asyncio.sleep(0.01)
        assert not third.done()
        await limiter.release(a1)
        await asyncio.wait_for(third, 1)
        await limiter.release(b)
        assert fleet.asked == ["a", "a", "b", "a"] and fleet.released == 2

    asyncio.run(scenario())


def test_a_runner_with_a_gate_runs_a_big_chunk_a_few_jobs_at_a_time() -> None:
    from worker.kinds.dispatch import Runner

    running = 0
    peak = 0

    async def run_one(raw: Any) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1
        return "result"

    runner = Runner.__new__(Runner)
    runner.gate = JobGate(4)
    runner.run_one = run_one  # type: ignore[method-assign]
    chunk = [{"id": f"j{i}", "kind": "decide"} for i in range(40)]
    assert asyncio.run(runner.run_chunk(chunk)) == ["result"] * 40
    assert peak == 4


def test_a_job_naming_no_provider_takes_the_default_providers_slots() -> None:
    """Found by an attack: ``{}`` and ``{"provider": "faux"}`` counted as two providers, twice
    the slots of the one that serves both."""
    async def scenario() -> dict[str, int]:
        gate = JobGate(1, "faux")
        inside = 0
        peak = 0

        async def one(raw: Any) -> None:
            nonlocal inside, peak
            async with gate.slot(raw):
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.01)
                inside -= 1

        await asyncio.gather(one({}), one({"provider": "faux"}), one({"provider": ""}))
        return {"peak": peak, "tracked": gate.providers_tracked}

    assert asyncio.run(scenario()) == {"peak": 1, "tracked": 0}


def test_made_up_provider_names_are_not_kept() -> None:
    """Found by an attack: each distinct name a job gave kept a semaphore for good, so a
    stream of made-up names grew the worker's memory without bound."""
    async def scenario() -> tuple[int, int]:
        gate = JobGate(2)
        limiter = LocalLimiter(2)
        waiting_seen = 0

        async def one(name: str) -> None:
            nonlocal waiting_seen
            async with gate.slot({"provider": name}):
                token = await limiter.acquire(name)
                waiting_seen = max(waiting_seen, gate.providers_tracked)
                await asyncio.sleep(0)
                await limiter.release(token)

        await asyncio.gather(*(one(f"made-up-{n}") for n in range(2000)))
        return gate.providers_tracked, waiting_seen

    tracked, at_most = asyncio.run(scenario())
    assert tracked == 0
    assert at_most > 1  # they were tracked while running: the count is of something


def test_a_cancelled_wait_for_a_slot_leaves_nothing_tracked() -> None:
    async def scenario() -> int:
        gate = JobGate(1)
        hold = asyncio.Event()

        async def holder() -> None:
            async with gate.slot({"provider": "p"}):
                await hold.wait()

        first = asyncio.ensure_future(holder())
        await asyncio.sleep(0)
        waiter = asyncio.ensure_future(holder())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        hold.set()
        await first
        return gate.providers_tracked

    assert asyncio.run(scenario()) == 0
