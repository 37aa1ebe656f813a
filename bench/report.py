"""The figures of one run, the issue's targets checked against them, the table and the JSON."""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.config import BenchConfig
from bench.direct import DirectRun
from bench.noop import NoopRun
from bench.openloop import OPEN_DIRECT, OPEN_WORKER, OpenLoopRun
from bench.pipeline import PipelineRun
from bench.procs import TreeUsage
from bench.producer import ProducerRun

__all__ = ["Results", "print_report"]

MB = 2**20


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Row:
    scenario: str
    latency_ms: float
    ledger: str | None
    rate: float
    decisions: int
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    cpu_ms_per_decision: float | None = None
    peak_rss_mb: float | None = None
    paced_rate: float | None = None
    types: dict[str, int] = field(default_factory=dict)
    #: An open-loop run at half the rate the same worker sustained (the latency target's).
    half: bool = False


@dataclass
class Results:
    config: BenchConfig
    rows: list[Row] = field(default_factory=list)
    noop_rate: float | None = None
    #: The no-op worker's CPU a message (ms): what Celery's delivery, tracer and
    #: acknowledgement of one message cost on the thread pool (the loop pool skips the tracer).
    noop_cpu_ms: float | None = None
    producer_rate: float | None = None
    producer_messages: int | None = None
    rss_runs: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    logs_tail: dict[str, str] = field(default_factory=dict)
    #: Per pipeline run with ``--profile``: share of the worker's Python CPU per component.
    profiles: dict[str, dict[str, float]] = field(default_factory=dict)
    load_before: tuple[float, float, float] = field(default_factory=os.getloadavg)

    # --- recording ---------------------------------------------------------------------
    def producer(self, run: ProducerRun) -> None:
        self.producer_rate = run.rate
        self.producer_messages = run.messages

    def direct(self, latency_ms: float, run: DirectRun) -> None:
        # No added latency: direct runs saturated only (its queueing is not the worker's).
        self.rows.append(
            Row(
                "direct", latency_ms, None, run.rate, run.decisions,
                cpu_ms_per_decision=run.cpu_s * 1000 / run.decisions,
            )
        )

    def open_loop(
        self, scenario: str, run: OpenLoopRun, cpu_s: float | None = None, *, half: bool = False
    ) -> None:
        """One open-loop run: ``rate`` is the sustained rate, ``paced_rate`` the offered;
        ``half``: offered at half the rate the worker sustained (the latency target's)."""
        cpu = run.cpu_s if cpu_s is None else cpu_s
        self.rows.append(
            Row(
                scenario, run.latency_ms, "postgresql" if scenario != OPEN_DIRECT else None,
                run.sustained_rate, run.offered, run.added(0.5), run.added(0.99),
                cpu * 1000 / run.offered, paced_rate=run.offered_rate, types=run.types,
                half=half,
            )
        )

    def noop(self, run: NoopRun, cpu_s: float | None = None) -> None:
        self.noop_rate = run.rate
        if cpu_s is not None:
            self.noop_cpu_ms = 1000 * cpu_s / run.tasks

    def pipeline(
        self,
        ledger: str,
        latency_ms: float,
        run: PipelineRun,
        usage: TreeUsage,
        paced: PipelineRun,
        paced_rate: float,
    ) -> None:
        added = [v - latency_ms for v in paced.latencies_ms]
        self.rows.append(
            Row(
                "pipeline", latency_ms, ledger, run.rate, run.decisions,
                added_p50_ms=_pct(added, 0.5), added_p99_ms=_pct(added, 0.99),
                cpu_ms_per_decision=usage.cpu_s * 1000 / run.decisions,
                peak_rss_mb=usage.peak_rss_bytes / MB, paced_rate=paced_rate,
                types={**run.types},
            )
        )

    def fleet(
        self, workers: int, ledger: str, latency_ms: float, run: PipelineRun, usage: TreeUsage
    ) -> None:
        # Saturated only: the added latency is the one-process rows' measure.
        self.rows.append(
            Row(
                f"pipeline x{workers}", latency_ms, ledger, run.rate, run.decisions,
                cpu_ms_per_decision=usage.cpu_s * 1000 / run.decisions,
                peak_rss_mb=usage.peak_rss_bytes / MB, types={**run.types},
            )
        )

    def rss(
        self, ledger: str, target: int, in_flight: int, usage: TreeUsage, run: PipelineRun
    ) -> None:
        self.rss_runs.append(
            {
                "ledger": ledger,
                "target_in_flight": target,
                "peak_in_flight": in_flight,
                "peak_rss_mb": round(usage.peak_rss_bytes / MB, 1),
                "rate": round(run.rate, 1),
                "types": run.types,
            }
        )

    # --- derived -----------------------------------------------------------------------
    def direct_row(self, latency_ms: float) -> Row | None:
        """The saturated ``direct`` row at this latency, if it ran."""
        for row in self.rows:
            if row.scenario == "direct" and row.latency_ms == latency_ms:
                return row
        return None

    def direct_rate(self, latency_ms: float) -> float | None:
        row = self.direct_row(latency_ms)
        return None if row is None else row.rate

    def open_direct(self, row: Row) -> Row | None:
        if row.half:
            return None
        for other in self.rows:
            offered, peer = row.paced_rate or 0.0, other.paced_rate or 0.0
            same = (other.scenario, other.latency_ms) == (OPEN_DIRECT, row.latency_ms)
            if same and abs(peer - offered) < 0.2 * max(offered, 1.0):
                return other
        return None

    def targets(self) -> list[dict[str, Any]]:
        """Each of the issue's targets: the figure it is judged on and whether it is met."""
        out: list[dict[str, Any]] = []

        def add(name: str, value: float | None, goal: float, *, at_most: bool = False) -> None:
            met = None if value is None else (value <= goal if at_most else value >= goal)
            out.append({"target": name, "value": value, "goal": goal, "met": met})

        for row in self.rows:
            if row.scenario != "pipeline":
                continue
            where = f"chunked {row.ledger} {row.latency_ms:g} ms"
            direct = self.direct_rate(row.latency_ms)
            if row.latency_ms == 0:
                noop = self.noop_rate
                add(f"{where}: pipeline / celery-noop", row.rate / noop if noop else None, 2.0)
                add(f"{where}: pipeline / direct", row.rate / direct if direct else None, 0.5)
            else:
                add(f"{where}: pipeline / direct", row.rate / direct if direct else None, 0.9)
            peer = self.direct_row(row.latency_ms)
            if row.cpu_ms_per_decision and peer is not None and peer.cpu_ms_per_decision:
                ratio = row.cpu_ms_per_decision / peer.cpu_ms_per_decision
                add(f"{where}: worker CPU / direct's", ratio, 1.5, at_most=True)
        for row in self.rows:
            if row.scenario != OPEN_WORKER or row.latency_ms != 1000:
                continue
            if row.half:
                where = f"single-job 1 s, at half its maximum ({row.paced_rate or 0:,.0f}/s)"
                add(f"{where}: added p50 ms", row.added_p50_ms, 20, at_most=True)
                add(f"{where}: added p99 ms", row.added_p99_ms, 100, at_most=True)
                continue
            where = f"single-job 1 s, {row.paced_rate or 0:,.0f}/s offered"
            peer = self.open_direct(row)
            if peer is not None:
                add(f"{where}: sustained / direct", row.rate / peer.rate, 0.9)
                if row.cpu_ms_per_decision and peer.cpu_ms_per_decision:
                    ratio = row.cpu_ms_per_decision / peer.cpu_ms_per_decision
                    add(f"{where}: worker CPU / direct's", ratio, 1.5, at_most=True)
        for rss in self.rss_runs:
            add(
                f"{rss['ledger']}: worker RSS MB, {rss['peak_in_flight']} in flight",
                rss["peak_rss_mb"] if rss["peak_in_flight"] >= rss["target_in_flight"] else None,
                300,
                at_most=True,
            )
        add("producer jobs/s (100,000-job batch)", self.producer_rate, 20_000)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "in_flight_per_process": self.config.in_flight,
            "rows": [asdict(r) for r in self.rows],
            "celery_noop_rate": self.noop_rate,
            "celery_noop_cpu_ms": self.noop_cpu_ms,
            "producer_rate": self.producer_rate,
            "producer_messages": self.producer_messages,
            "rss_runs": self.rss_runs,
            "targets": self.targets(),
            "duration_s": round(self.duration_s, 1),
            "load_before": self.load_before,
            "load_after": os.getloadavg(),
            "cpus": os.cpu_count(),
            "commit": _commit(),
            "worker_errors": self.logs_tail,
            "profiles": self.profiles,
        }


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _pool_name(config: BenchConfig) -> str:
    if config.pool == "loop":
        return "the default worker (loop pool)"
    return f"{config.pool} pool x{config.pool_threads}"


def _f(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def print_report(results: Results) -> None:
    console = Console(width=150)
    c = results.config
    table = Table(
        title=f"decision-worker bench: 1 worker process, {_pool_name(c)}, "
        f"chunks of {c.chunk_size} ({c.in_flight} in flight)"
    )
    for column in ("scenario", "faux", "ledger", "decisions/s", "x direct", "x noop",
                   "added p50", "added p99", "CPU ms/dec", "peak RSS"):
        table.add_column(column, justify="left" if column in ("scenario", "ledger") else "right")
    if results.noop_rate:
        table.add_row("celery-noop", "-", "-", _f(results.noop_rate, "{:,.0f}"), "", "1.00",
                      "", "", _f(results.noop_cpu_ms, "{:.2f}"), "")
    for row in results.rows:
        direct = results.direct_rate(row.latency_ms)
        if row.scenario.startswith("open loop"):
            peer = results.open_direct(row)
            direct = peer.rate if peer is not None else None
        noop = results.noop_rate
        table.add_row(
            row.scenario
            + (f" @{row.paced_rate:,.0f}/s" if row.scenario.startswith("open") else "")
            + (" (half)" if row.half else ""),
            f"{row.latency_ms:g} ms",
            row.ledger or "-",
            _f(row.rate, "{:,.0f}"),
            _f(row.rate / direct if direct else None, "{:.2f}"),
            _f(row.rate / noop if noop else None, "{:.2f}"),
            _f(row.added_p50_ms, "{:.1f} ms"),
            _f(row.added_p99_ms, "{:.1f} ms"),
            _f(row.cpu_ms_per_decision, "{:.2f}"),
            _f(row.peak_rss_mb, "{:.0f} MB"),
        )
    console.print(table)
    for rss in results.rss_runs:
        console.print(
            f"RSS with {rss['peak_in_flight']} decisions in flight ({rss['ledger']}): "
            f"{rss['peak_rss_mb']:.0f} MB peak"
        )
    if results.producer_rate:
        console.print(
            f"producer: {results.producer_rate:,.0f} jobs/s for "
            f"{c.producer_jobs:,} jobs ({results.producer_messages} messages, the client's "
            "default chunk size)"
        )
    targets = Table(title="targets (issue 18; the RSS and producer lines: issue 6)")
    for column in ("target", "value", "goal", "met"):
        targets.add_column(column)
    for t in results.targets():
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[t["met"]]
        targets.add_row(t["target"], _f(t["value"], "{:,.2f}"), f"{t['goal']:g}", met)
    console.print(targets)
    load = os.getloadavg()
    console.print(
        f"load average before {results.load_before[0]:.2f}, after {load[0]:.2f} "
        f"({os.cpu_count()} CPUs); {results.duration_s:.0f} s"
    )
    for tag, shares in results.profiles.items():
        console.print(f"worker CPU by component, {tag} (py-spy --gil):")
        for component, share in shares.items():
            console.print(f"  {share * 100:5.1f}%  {component}")
    for name, tail in results.logs_tail.items():
        console.print(f"[red]{name} had a traceback:[/]\n{tail}")
