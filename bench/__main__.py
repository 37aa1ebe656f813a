"""``python -m bench [--quick] [--only STAGE ...] [--profile]``: see ``bench/__init__.py``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import redis
import sqlalchemy as sa

from bench.config import RESULTS_DIR, BenchConfig
from bench.direct import run_direct
from bench.noop import run_noop
from bench.openloop import (
    OPEN_DIRECT,
    OPEN_THREADS,
    OPEN_WORKER,
    direct_open_loop,
    open_loop,
    redis_calls,
)
from bench.pipeline import paced_run, saturated_run
from bench.procs import BIN, DECISIONS, InFlight, Meter, faux_process, spawn_worker
from bench.producer import run_producer
from bench.profile import summarise
from bench.report import Results, print_report
from bench.workload import decide_jobs
from shared.client import Client
from shared.settings import Settings

STAGES = (
    "producer", "direct", "noop", "open-loop", "pipeline-sqlite", "pipeline-postgresql", "rss",
    "fleet-postgresql",
)


def _redis_url(config: BenchConfig) -> str:
    return f"redis://127.0.0.1:{config.redis_port}/{config.redis_db}"


def _worker_env(config: BenchConfig, ledger_url: str, faux_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONS_")}
    env.update(
        {
            "DECISIONS_BROKER_URL": _redis_url(config),
            "DECISIONS_REDIS_URL": _redis_url(config),
            "DECISIONS_LEDGER_URL": ledger_url,
            "DECISIONS_FAUX_URL": faux_url,
            "DECISIONS_REAPER_INTERVAL_S": "0",
            # The bench's Redis keeps nothing on disk; its replies are thrown away anyway.
            "DECISIONS_ACCEPT_VOLATILE_STREAMS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _pool_args(config: BenchConfig, pool: str | None = None) -> list[str]:
    """The worker's arguments: none for the loop pool (the default worker), else the pool."""
    pool = pool or config.pool
    named = [] if pool == "loop" else [f"--pool={pool}", f"--concurrency={config.pool_threads}"]
    return [*named, "--without-mingle", "--without-gossip"]


def _set_latency(faux_url: str, latency_ms: float) -> None:
    httpx.patch(
        f"{faux_url}/_faux/behaviour", json={"latency_ms": latency_ms}, timeout=10
    ).raise_for_status()


@contextmanager
def _pg_schema(config: BenchConfig) -> Iterator[str]:
    schema = f"bench_{os.getpid()}_{int(time.time())}"
    engine = sa.create_engine(config.pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{config.pg_url}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@contextmanager
def _profiled(pid: int, out: Path, seconds: float, enabled: bool) -> Iterator[None]:
    """py-spy on the worker tree while the block runs (``--profile``)."""
    if not enabled:
        yield
        return
    proc = subprocess.Popen(
        [
            # --gil: samples are of the thread holding the GIL, i.e. shares of Python CPU;
            # --nonblocking: the worker is never paused (the threads pool is one process).
            str(BIN / "py-spy"), "record", "--pid", str(pid), "--gil", "--nonblocking",
            "--format", "raw", "--output", str(out), "--duration", str(int(seconds)),
            "--rate", "250",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


@dataclass(frozen=True)
class _Bench:
    """What every stage runs with."""

    config: BenchConfig
    faux_url: str
    client: Client
    r: redis.Redis
    logs: Path
    results: Results


def _pipeline_stage(
    bench: _Bench, name: str, ledger_url: str, *, profile: bool, rss: bool
) -> None:
    config, faux_url, client, r = bench.config, bench.faux_url, bench.client, bench.r
    logs, results = bench.logs, bench.results
    env = _worker_env(config, ledger_url, faux_url)
    argv = [DECISIONS, "worker", "--migrate", *_pool_args(config)]
    with spawn_worker(argv, env, logs / f"worker-{name}.log") as worker:
        for latency in config.faux_latencies_ms:
            _set_latency(faux_url, latency)
            tag = f"{name}-{latency:g}ms"
            n = config.decisions_0ms if latency == 0 else config.decisions_200ms
            saturated_run(client, r, f"warm-{tag}", config.warmup, chunk_size=config.chunk_size)
            expected_s = 600.0  # an upper bound: py-spy is stopped when the run ends
            with (
                Meter(worker.pid) as meter,
                _profiled(worker.pid, RESULTS_DIR / f"profile-{tag}.txt", expected_s, profile),
            ):
                run = saturated_run(client, r, f"max-{tag}", n, chunk_size=config.chunk_size)
            half = run.rate / 2
            paced = paced_run(
                client, r, f"half-{tag}", rate=half, duration_s=config.latency_run_s,
                tick_s=config.latency_tick_s,
            )
            results.pipeline(name, latency, run, meter.usage, paced, half)
            raw = RESULTS_DIR / f"profile-{tag}.txt"
            if profile and raw.exists():
                results.profiles[tag] = summarise(raw)
            print(f"  {tag}: {run.rate:,.0f}/s  types={run.types}", flush=True)
        if rss:
            _set_latency(faux_url, config.rss_latency_ms)
            chunk = -(-config.rss_in_flight // config.pool_threads)
            n = chunk * config.pool_threads
            with Meter(worker.pid) as meter, InFlight(faux_url, r, f"bench:rss-{name}") as seen:
                run = saturated_run(client, r, f"rss-{name}", n, chunk_size=chunk)
            results.rss(name, config.rss_in_flight, seen.peak, meter.usage, run)
            print(
                f"  rss-{name}: peak {meter.usage.peak_rss_bytes / 2**20:.0f} MB with "
                f"{seen.peak} in flight",
                flush=True,
            )


def _fleet_stage(bench: _Bench, ledger_url: str) -> None:
    """``config.fleet_workers`` worker processes on one ledger: what a second core buys."""
    config, faux_url, client, r = bench.config, bench.faux_url, bench.client, bench.r
    logs, results = bench.logs, bench.results
    env = _worker_env(config, ledger_url, faux_url)
    argv = [DECISIONS, "worker", "--migrate", *_pool_args(config)]
    with contextlib.ExitStack() as stack:
        workers = [
            stack.enter_context(spawn_worker(argv, env, logs / f"worker-fleet-{i}.log"))
            for i in range(config.fleet_workers)
        ]
        for latency in config.faux_latencies_ms:
            _set_latency(faux_url, latency)
            tag = f"fleet-{latency:g}ms"
            n = config.decisions_0ms if latency == 0 else config.decisions_200ms
            saturated_run(client, r, f"warm-{tag}", config.warmup, chunk_size=config.chunk_size)
            with Meter(*(w.pid for w in workers)) as meter:
                run = saturated_run(client, r, f"max-{tag}", n, chunk_size=config.chunk_size)
            results.fleet(config.fleet_workers, "postgresql", latency, run, meter.usage)
            print(f"  {tag}: {run.rate:,.0f}/s  types={run.types}", flush=True)


def _open_loop_stage(bench: _Bench, ledger_url: str, *, profile: bool) -> None:
    """Single-job messages at fixed rates: ``direct``, the default ``decisions worker`` (the
    loop pool, no pool arguments), and with ``--long`` a thread pool, in that order."""
    config, faux_url, client, r = bench.config, bench.faux_url, bench.client, bench.r
    env = _worker_env(config, ledger_url, faux_url)
    workers: list[tuple[str, list[str]]] = [(OPEN_WORKER, [])]
    if config.open_loop_threads:
        workers.append(
            (OPEN_THREADS, ["--pool=threads", f"--concurrency={config.open_loop_threads}"])
        )
    for latency in config.open_loop_latencies_ms:
        _set_latency(faux_url, latency)
        for rate in config.open_loop_rates:
            tag = f"{latency:g}ms-{rate:g}"
            run = direct_open_loop(
                faux_url, f"od-{tag}", rate=rate, duration_s=config.open_loop_s,
                latency_ms=latency, in_flight=config.open_loop_in_flight,
            )
            bench.results.open_loop(OPEN_DIRECT, run)
            print(f"  direct {tag}: {run.sustained_rate:,.1f}/s", flush=True)
    for name, extra in workers:
        argv = [DECISIONS, "worker", "--migrate", "--without-mingle", "--without-gossip", *extra]
        log = bench.logs / f"worker-open-loop-{len(extra)}.log"
        with spawn_worker(argv, env, log) as worker:
            for latency in config.open_loop_latencies_ms:
                _set_latency(faux_url, latency)
                for rate in config.open_loop_rates:
                    tag = f"{latency:g}ms-{rate:g}-{len(extra)}"
                    raw = RESULTS_DIR / f"profile-open-{tag}.txt"
                    calls_before = redis_calls(r)
                    with Meter(worker.pid) as meter, _profiled(worker.pid, raw, 600.0, profile):
                        run = open_loop(
                            client, r, f"ow-{tag}", rate=rate, duration_s=config.open_loop_s,
                            latency_ms=latency,
                        )
                    bench.results.open_loop(name, run, meter.usage.cpu_s)
                    calls = redis_calls(r)
                    # The latency target's rate: half the maximum this process sustained.
                    half = round(min(run.sustained_rate, rate) / 2, 1)
                    with Meter(worker.pid) as meter_half:
                        at_half = open_loop(
                            client, r, f"oh-{tag}", rate=half, duration_s=config.open_loop_s,
                            latency_ms=latency,
                        )
                    bench.results.open_loop(name, at_half, meter_half.usage.cpu_s, half=True)
                    per_job = {
                        k: round((v - calls_before.get(k, 0)) / run.offered, 2)
                        for k, v in calls.items()
                        if v - calls_before.get(k, 0) >= run.offered / 10
                    }
                    print(f"  Redis calls a job (all clients): {sum(per_job.values()):.1f} "
                          f"{dict(sorted(per_job.items(), key=lambda kv: -kv[1]))}", flush=True)
                    if profile and raw.exists():
                        bench.results.profiles[f"open-{tag}"] = summarise(raw)
                    print(
                        f"  {name} {tag}: offered {run.offered_rate:,.1f}/s, sustained "
                        f"{run.sustained_rate:,.1f}/s, added p50 {run.added(0.5):,.0f} ms; "
                        f"at {half:g}/s added p50 {at_half.added(0.5):,.1f} ms, "
                        f"p99 {at_half.added(0.99):,.1f} ms",
                        flush=True,
                    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of the work (a smoke run)")
    parser.add_argument("--only", nargs="*", choices=STAGES, help="run these stages only")
    parser.add_argument("--profile", action="store_true", help="py-spy the worker (raw stacks)")
    parser.add_argument(
        "--long", action="store_true", help="the open loop at 3 rates for 30 s, and threads"
    )
    args = parser.parse_args(argv)
    config = BenchConfig().quick() if args.quick else BenchConfig()
    config = config.long() if args.long else config
    stages = set(args.only or STAGES)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results = Results(config)

    r = redis.Redis.from_url(_redis_url(config))
    r.flushdb()
    settings = Settings(broker_url=_redis_url(config), redis_url=_redis_url(config))
    client = Client(settings)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            # Logs are kept beside the results (the ledger file and the rest go with tmp).
            logs = RESULTS_DIR / f"logs-{stamp}"
            logs.mkdir()
            data = Path(tmp)
            with faux_process(logs / "faux.log") as faux_url:
                if "producer" in stages:
                    print("producer ...", flush=True)
                    chunk = settings.chunk_size
                    produced = run_producer(client, r, config.producer_jobs, chunk_size=chunk)
                    results.producer(produced)
                if "direct" in stages:
                    for latency in config.faux_latencies_ms:
                        print(f"direct {latency:g} ms ...", flush=True)
                        _set_latency(faux_url, latency)
                        n = config.decisions_0ms if latency == 0 else config.decisions_200ms
                        jobs = decide_jobs(f"direct-{latency:g}", n + config.warmup)
                        results.direct(
                            latency, run_direct(faux_url, jobs, config.in_flight, config.warmup)
                        )
                if "noop" in stages:
                    print("celery-noop ...", flush=True)
                    env = _worker_env(config, "sqlite:///" + str(data / "noop.db"), faux_url)
                    argv_noop = [
                        str(BIN / "celery"), "-A", "bench.noop_app", "worker", "-Q", "bench-noop",
                        f"--loglevel={settings.log_level}", *_pool_args(config, "threads"),
                    ]
                    with spawn_worker(argv_noop, env, logs / "noop.log") as noop_worker:
                        meter = Meter(noop_worker.pid)
                        run = run_noop(
                            client.celery, r, config.noop_tasks, warmup=config.warmup,
                            meter=meter,
                        )
                        results.noop(run, meter.usage.cpu_s)
                bench = _Bench(config, faux_url, client, r, logs, results)
                if "open-loop" in stages:
                    print("open loop, single-job messages, PostgreSQL ledger ...", flush=True)
                    with _pg_schema(config) as pg_url:
                        _open_loop_stage(bench, pg_url, profile=args.profile)
                if "pipeline-sqlite" in stages:
                    print("pipeline, SQLite ledger ...", flush=True)
                    sqlite_url = f"sqlite:///{data / 'ledger.db'}"
                    _pipeline_stage(bench, "sqlite", sqlite_url, profile=args.profile, rss=False)
                if "pipeline-postgresql" in stages or "rss" in stages:
                    print("pipeline, PostgreSQL ledger ...", flush=True)
                    with _pg_schema(config) as pg_url:
                        _pipeline_stage(
                            bench, "postgresql", pg_url, profile=args.profile,
                            rss="rss" in stages,
                        )
                if "fleet-postgresql" in stages:
                    print(f"{config.fleet_workers} worker processes, PostgreSQL ledger ...")
                    with _pg_schema(config) as pg_url:
                        _fleet_stage(bench, pg_url)
            results.logs_tail = {
                p.name: p.read_text(errors="replace")[-1500:]
                for p in logs.glob("*.log")
                if "Traceback" in p.read_text(errors="replace")
            }
    finally:
        r.flushdb()
        client.close()
    results.duration_s = time.monotonic() - started
    out = RESULTS_DIR / f"bench-{stamp}.json"
    out.write_text(json.dumps(results.as_json(), indent=2, sort_keys=True))
    print_report(results)
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
