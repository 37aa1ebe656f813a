"""Prometheus metrics of a worker: one endpoint per worker (``DECISIONS_METRICS_PORT``).

Pool processes write samples through prometheus-client's multiprocess mode and the main
process serves them summed (``multiproc``); the runner reports through
``PrometheusObserver``, a limiter through ``record_rate_limit_wait`` (or wrapped in
``MeteredLimiter``); fleet gauges are read at scrape time (``collector``, ``fleet``). Every
label value is folded into a closed set first (``Labels``: anything else is ``other``).
"""

from worker.observability.metrics.families import LATENCY_BUCKETS_S, Families, families
from worker.observability.metrics.fleet import (
    EscalationCounts,
    LedgerGauges,
    QueueDepth,
    WorkerInfo,
    escalation_counts,
    ledger_gauges,
    queue_depth,
    workers,
)
from worker.observability.metrics.labels import OTHER, Labels
from worker.observability.metrics.lifecycle import (
    limiter_for,
    observer_for,
    on_process_init,
    on_process_shutdown,
    on_shutdown,
    on_shutting_down,
    on_worker_init,
    on_worker_ready,
)
from worker.observability.metrics.prometheus import (
    MeteredLimiter,
    PrometheusObserver,
    record_rate_limit_wait,
    record_rate_limited,
)
from worker.observability.metrics.server import MetricsServer, Readiness

__all__ = [
    "LATENCY_BUCKETS_S",
    "OTHER",
    "EscalationCounts",
    "Families",
    "Labels",
    "LedgerGauges",
    "MeteredLimiter",
    "MetricsServer",
    "PrometheusObserver",
    "QueueDepth",
    "Readiness",
    "WorkerInfo",
    "escalation_counts",
    "families",
    "ledger_gauges",
    "limiter_for",
    "observer_for",
    "on_process_init",
    "on_process_shutdown",
    "on_shutdown",
    "on_shutting_down",
    "on_worker_init",
    "on_worker_ready",
    "queue_depth",
    "record_rate_limit_wait",
    "record_rate_limited",
    "workers",
]
