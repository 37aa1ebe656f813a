"""Fleet gauges collected at scrape time in the worker's main process, at most once per
interval however often Prometheus (or several of them) scrapes.

Every worker exports the same fleet-wide figures: aggregate them with ``max`` across workers,
never ``sum``. A source that cannot be reached exports ``decisions_fleet_source_up 0`` and
none of its gauges, rather than a stale or invented 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import redis
import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from worker.ledger import CALL_STATUSES, Ledger
from worker.ledger.outbox_rows import OUTBOX_GRACE_S
from worker.observability.metrics.fleet import escalation_counts, ledger_gauges

__all__ = ["FleetCollector"]

log = structlog.get_logger("decisions.metrics")


class FleetCollector(Collector):
    def __init__(
        self,
        ledger: Callable[[], Ledger],
        client: Callable[[], redis.Redis],
        *,
        interval_s: float,
    ) -> None:
        self._ledger = ledger
        self._redis = client
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._cached: list[GaugeMetricFamily] = []
        self._at: float | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            now = time.monotonic()
            if self._at is None or now - self._at >= self.interval_s:
                self._cached = self._read()
                self._at = now
            yield from self._cached

    def _read(self) -> list[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "decisions_fleet_source_up",
            "Whether this worker could read a fleet-wide source at the last collection",
            labels=["source"],
        )
        found: list[GaugeMetricFamily] = [up]
        try:
            ledger = self._ledger()
            gauges = ledger_gauges(ledger)
        except Exception as exc:  # the ledger is down: say so, export nothing stale
            log.warning("metrics.ledger_unreadable", error=type(exc).__name__)
            up.add_metric(["ledger"], 0)
        else:
            up.add_metric(["ledger"], 1)
            calls = GaugeMetricFamily(
                "decisions_ledger_calls",
                "Ledger calls by status, fleet-wide (claimed = in flight somewhere)",
                labels=["status"],
            )
            for status in sorted(CALL_STATUSES):
                calls.add_metric([status], gauges.calls_by_status.get(status, 0))
            expired = GaugeMetricFamily(
                "decisions_ledger_claims_expired",
                "Claimed calls whose lease ran out (a worker died mid-call; the reaper settles)",
                value=gauges.claims_expired,
            )
            unpublished = GaugeMetricFamily(
                "decisions_ledger_jobs_unpublished",
                f"Jobs finished over {OUTBOX_GRACE_S:g} s ago whose message is still unpublished "
                "(the outbox backlog, which the reaper's relay publishes)",
                value=gauges.jobs_unpublished,
            )
            found += [calls, expired, unpublished]
            found += self._budgets(ledger)
        try:
            counts = escalation_counts(self._redis())
        except redis.RedisError as exc:
            log.warning("metrics.redis_unreadable", error=type(exc).__name__)
            up.add_metric(["redis"], 0)
        else:
            up.add_metric(["redis"], 1)
            open_ = GaugeMetricFamily(
                "decisions_escalations_open",
                "Escalations not resolved yet, by state (waiting for a reviewer, claimed; "
                "unreadable: a reader found no reviewer can answer it)",
                labels=["state"],
            )
            open_.add_metric(["waiting"], counts.waiting)
            open_.add_metric(["claimed"], counts.claimed)
            open_.add_metric(["unreadable"], counts.unreadable)
            found.append(open_)
        return found

    def _budgets(self, ledger: Ledger) -> list[GaugeMetricFamily]:
        """The budgets changed most recently (``Ledger.budgets``), by ``budget`` label
        (``batch:<name>`` or ``day:<provider>:<date>``)."""
        try:
            statuses = ledger.budgets()
        except Exception as exc:  # the ledger went down between two reads: nothing stale
            log.warning("metrics.budgets_unreadable", error=type(exc).__name__)
            return []
        labels = ["budget"]
        limit = GaugeMetricFamily(
            "decisions_budget_limit_usd", "A budget's limit (USD)", labels=labels
        )
        reserved = GaugeMetricFamily(
            "decisions_budget_reserved_usd",
            "Worst cases reserved by requests in flight under a budget (USD)",
            labels=labels,
        )
        held = GaugeMetricFamily(
            "decisions_budget_held_unknown_usd",
            "Reservations kept whole for requests whose cost stayed unknown (USD)",
            labels=labels,
        )
        spent = GaugeMetricFamily(
            "decisions_budget_spent_usd",
            "Costs booked under a budget, by basis (reported, estimate; USD)",
            labels=[*labels, "basis"],
        )
        left = GaugeMetricFamily(
            "decisions_budget_left_usd",
            "What is left of a budget: limit minus reserved, held and spent (USD)",
            labels=labels,
        )
        exhausted = GaugeMetricFamily(
            "decisions_budget_jobs_exhausted",
            "A batch's jobs escalated budget_exhausted (not sent; budget resume reruns them)",
            labels=labels,
        )
        for status in statuses:
            name = [status.scope]
            if status.limit_usd is not None:
                limit.add_metric(name, status.limit_usd)
                left.add_metric(name, status.left_usd or 0.0)
            reserved.add_metric(name, status.reserved_usd)
            held.add_metric(name, status.held_unknown_usd)
            for basis in ("reported", "estimate"):
                spent.add_metric([*name, basis], status.booked_by_basis.get(basis, 0.0))
            exhausted.add_metric(name, status.jobs_exhausted)
        return [limit, reserved, held, spent, left, exhausted]
