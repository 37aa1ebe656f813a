"""``python -m bench.http_stacks``: CPU per request of the HTTP stacks that keep httpx's
interface, against the faux (its own process), same requests, same concurrency.

Stacks: the worker's own client (``worker.http.connection_pool``: httpx over sharded httpcore pools)
on asyncio's loop and on uvloop, httpx over aiohttp (``httpx-aiohttp``'s transport) on
both loops, a default ``AsyncClient`` of httpx and of ``httpx2`` (Pydantic's maintained fork,
with ``httpcore2``), and the worker's own client on ``httpx2`` (``bench.http_stacks_fork``, a
process of its own). The optional packages are only imported here; a stack whose package is
missing is reported as such. Issue 18 asked for these figures before choosing one
(``bench/HISTORY.md`` has them).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.direct import prepared_requests
from bench.procs import faux_process
from bench.workload import decide_jobs
from worker.http.connection_pool import sharded_client

__all__ = ["STACKS", "main", "measure"]

Requests = list[tuple[str, bytes, dict[str, str]]]


def _worker_client(concurrency: int) -> httpx.AsyncClient:
    return sharded_client(max_connections=concurrency, timeout=60)


def _plain_client(module: str) -> Callable[[int], httpx.AsyncClient]:
    """A default ``AsyncClient`` of ``module`` (``httpx``, or the fork ``httpx2``: the same
    interface, so the lanes drive it unchanged) with as many connections as lanes."""

    def make(concurrency: int) -> httpx.AsyncClient:
        lib = importlib.import_module(module)
        limits = lib.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        client: httpx.AsyncClient = lib.AsyncClient(limits=limits, timeout=60)
        return client

    return make


def _aiohttp_client(concurrency: int) -> httpx.AsyncClient:
    transport_module = importlib.import_module("httpx_aiohttp")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    transport = transport_module.AiohttpTransport(limits=limits)
    return httpx.AsyncClient(transport=transport, timeout=60)


#: (name, client factory, loop: "asyncio" or "uvloop").
STACKS: tuple[tuple[str, Callable[[int], httpx.AsyncClient], str], ...] = (
    ("httpx (worker.http.connection_pool), asyncio", _worker_client, "asyncio"),
    ("httpx (worker.http.connection_pool), uvloop", _worker_client, "uvloop"),
    ("httpx-aiohttp transport, asyncio", _aiohttp_client, "asyncio"),
    ("httpx-aiohttp transport, uvloop", _aiohttp_client, "uvloop"),
    ("httpx AsyncClient (its own pool), asyncio", _plain_client("httpx"), "asyncio"),
    ("httpx2 AsyncClient (its own pool), asyncio", _plain_client("httpx2"), "asyncio"),
)


async def _lanes(client: httpx.AsyncClient, requests: Requests, concurrency: int) -> None:
    queue = iter(requests)

    async def lane() -> None:
        for url, body, headers in queue:
            response = await client.post(url, content=body, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"the faux answered {response.status_code}")
            response.json()

    await asyncio.gather(*(lane() for _ in range(concurrency)))


async def _run(
    make: Callable[[int], httpx.AsyncClient], requests: Requests, warmup: int, concurrency: int
) -> tuple[float, float]:
    async with make(concurrency) as client:
        await _lanes(client, requests[:warmup], concurrency)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await _lanes(client, requests[warmup:], concurrency)
        return time.process_time() - cpu0, time.perf_counter() - wall0


def _runner(loop: str) -> Callable[[Any], Any]:
    if loop == "uvloop":
        return importlib.import_module("uvloop").run
    return asyncio.run


def measure(
    faux_url: str, n: int, warmup: int, concurrency: int, stacks: str = ""
) -> dict[str, Any]:
    """Per stack (those whose name holds ``stacks``): CPU ms a request and requests a second
    (or why it was not measured)."""
    requests = prepared_requests(faux_url, decide_jobs("http", n + warmup))
    out: dict[str, Any] = {}
    for name, make, loop in STACKS:
        if stacks not in name:
            continue
        try:
            cpu_s, wall_s = _runner(loop)(_run(make, requests, warmup, concurrency))
        except ImportError as missing:
            out[name] = f"not installed ({missing.name})"
            continue
        out[name] = {"cpu_ms": round(1000 * cpu_s / n, 3), "rate": round(n / wall_s, 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_stacks", description=__doc__)
    parser.add_argument("-n", type=int, default=3000, help="requests per stack")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="each stack this many times")
    parser.add_argument("--stacks", default="", help="only the stacks whose name holds this")
    args = parser.parse_args(argv)
    forked = [sys.executable, "-m", "bench.http_stacks_fork", "-n", str(args.n),
              "--concurrency", str(args.concurrency), "--stacks", "worker.http"]
    with tempfile.TemporaryDirectory() as tmp, faux_process(Path(tmp) / "faux.log") as url:
        for _ in range(args.rounds):
            found = measure(url, args.n, args.n // 10, args.concurrency, args.stacks)
            for name, figures in found.items():
                print(f"{name:40} {figures}", flush=True)
            if not args.stacks:  # the worker's own client on the fork, in a process of its own
                subprocess.run([*forked, "--faux", url], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
