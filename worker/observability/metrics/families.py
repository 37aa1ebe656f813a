"""The metric families a worker's processes write, built on first use.

Built lazily, never at import: prometheus-client picks single- or multi-process storage when
a metric is created, from ``PROMETHEUS_MULTIPROC_DIR``, which the worker sets at start-up
(``worker.observability.metrics.lifecycle``) before the pool forks.

Names follow Prometheus's conventions: a ``decisions_`` namespace, base units (seconds,
USD), ``_total`` on counters. Labels have small, fixed sets of values: provider names,
ledger statuses, outcomes, reasons; never a job id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

__all__ = ["LATENCY_BUCKETS_S", "Families", "families", "installed"]

#: From a fast cached answer to the 30 s provider timeout and the longest deadlines.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Families:
    jobs: Counter
    requests: Counter
    in_flight: Gauge
    latency: Histogram
    cost: Counter
    cost_unknown: Counter
    rate_limit_waits: Counter
    rate_limit_wait_seconds: Counter
    rate_limited: Counter
    poison: Counter
    ledger_unavailable: Counter
    ledger_conflicts: Counter
    group_commits: Counter
    group_commit_writes: Counter


class _Unrecorded:
    """A metric nobody records: every family, without the [metrics] extra."""

    def labels(self, *values: Any, **labels: Any) -> _Unrecorded:
        return self

    def inc(self, amount: float = 1) -> None:
        return None

    def dec(self, amount: float = 1) -> None:
        return None

    def set(self, value: float) -> None:
        return None

    def observe(self, amount: float) -> None:
        return None


@lru_cache(maxsize=1)
def installed() -> bool:
    """Whether prometheus-client (the optional ``[metrics]`` extra) can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=1)
def families() -> Families:
    """The families; without prometheus-client, ones that record nothing (the worker's own
    counters, the guard's and the ledger's, go on without it: ``lifecycle`` says it once)."""
    if not installed():
        unrecorded = cast(Any, _Unrecorded())
        return Families(**dict.fromkeys(Families.__dataclass_fields__, unrecorded))
    # Imported here: prometheus-client is the optional [metrics] extra.
    from prometheus_client import Counter, Gauge, Histogram

    return Families(
        jobs=Counter(
            "decisions_jobs_total",
            "Jobs finished, by kind, provider, outcome (result, escalation, rejected) and reason",
            ["kind", "provider", "outcome", "reason"],
        ),
        requests=Counter(
            "decisions_requests_total",
            "Paid requests (ledger calls) finished, by provider and ledger status",
            ["provider", "status"],
        ),
        in_flight=Gauge(
            "decisions_requests_in_flight",
            "Paid requests claimed and not yet finished in this worker",
            ["provider"],
            # A pool process that died takes its requests with it: count live processes only.
            multiprocess_mode="livesum",
        ),
        latency=Histogram(
            "decisions_request_duration_seconds",
            "Time from a claimed call's send to its recorded outcome",
            ["provider"],
            buckets=LATENCY_BUCKETS_S,
        ),
        cost=Counter(
            "decisions_cost_usd_total",
            "Cost booked for finished requests, by provider and basis (reported, estimate)",
            ["provider", "basis"],
        ),
        cost_unknown=Counter(
            "decisions_requests_cost_unknown_total",
            "Requests that may have been paid for at a cost nobody knows (never counted as 0)",
            ["provider"],
        ),
        rate_limit_waits=Counter(
            "decisions_rate_limit_waits_total",
            "Times a request waited for a fleet-wide rate or concurrency slot",
            ["provider"],
        ),
        rate_limit_wait_seconds=Counter(
            "decisions_rate_limit_wait_seconds_total",
            "Time requests spent waiting for a rate or concurrency slot",
            ["provider"],
        ),
        rate_limited=Counter(
            "decisions_rate_limited_total",
            "429 answers asking for quiet (Retry-After), by provider",
            ["provider"],
        ),
        poison=Counter(
            "decisions_poison_total",
            "Task messages the worker's guard dropped, and jobs it refused before the pool, "
            "by reason (worker.process.guard.POISON_REASONS)",
            ["reason"],
        ),
        ledger_unavailable=Counter(
            "decisions_ledger_unavailable_total",
            "Ledger writes that failed because the database was unreachable, locked or full",
            ["dialect"],
        ),
        ledger_conflicts=Counter(
            "decisions_ledger_conflicts_total",
            "Ledger transactions PostgreSQL aborted for a conflict with another (a deadlock, "
            "40P01, or a serialization failure, 40001), by whether they were run again "
            "(retried=no: the last try, then handled as an outage)",
            ["sqlstate", "retried"],
        ),
        group_commits=Counter(
            "decisions_group_commit_transactions_total",
            "Ledger transactions of this worker's group commit, which writes the jobs' rows "
            "(open and claim, finish, published marks): two a job, three when no other write "
            "comes within 50 ms of its publish, and fewer when jobs share them",
        ),
        group_commit_writes=Counter(
            "decisions_group_commit_writes_total",
            "Job writes those transactions carried (writes per transaction: how many share one)",
        ),
    )
