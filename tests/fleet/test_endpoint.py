"""The metrics endpoint without a worker: probe answers through a warm shutdown, fleet gauges
that say a source is down instead of exporting a stale or invented 0, and open escalations
counted as reviewers can open them."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from shared import keys
from shared.escalations import EscalationQueue
from shared.replies import EscalationMessage
from shared.streams import publish_once
from tests.fleet.support import flushed
from tests.support.open_escalations import open_escalations
from tests.support.ownservers import OwnRedis
from worker.ledger import Ledger
from worker.observability.metrics import MetricsServer, Readiness
from worker.observability.metrics.collector import FleetCollector
from worker.observability.metrics.fleet import EscalationCounts, escalation_counts


def unreachable_ledger() -> Ledger:
    return Ledger("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1")


def unreachable_redis() -> redis.Redis:
    # As the worker builds it: no retries, so a scrape answers at once.
    return redis.Redis(port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))


def test_probes_follow_the_worker_through_a_warm_shutdown() -> None:
    readiness = Readiness()
    server = MetricsServer(directory=None, readiness=readiness)
    port = server.start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 503  # not consuming yet
        readiness.ready.set()
        assert httpx.get(f"{base}/readyz").status_code == 200
        readiness.stopping.set()
        assert httpx.get(f"{base}/readyz").status_code == 503
        assert httpx.get(f"{base}/healthz").status_code == 200  # draining, not dead
        assert httpx.get(f"{base}/nowhere").status_code == 404
    finally:
        server.stop()


def test_an_unreachable_source_is_reported_not_zeroed(tmp_path: Path) -> None:
    collector = FleetCollector(unreachable_ledger, unreachable_redis, interval_s=60)
    families = {f.name: f for f in collector.collect()}
    up = {s.labels["source"]: s.value for s in families["decisions_fleet_source_up"].samples}
    assert up == {"ledger": 0, "redis": 0}
    assert "decisions_ledger_calls" not in families
    assert "decisions_escalations_open" not in families


def test_a_reachable_ledger_is_counted_and_cached(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.migrate()
    reads = []

    def counted() -> Ledger:
        reads.append(1)
        return ledger

    collector = FleetCollector(counted, unreachable_redis, interval_s=3600)
    server = MetricsServer(directory=None, readiness=Readiness(), extra=[collector])
    port = server.start("127.0.0.1", 0)
    try:
        for _ in range(3):
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        server.stop()
        server.registry.unregister(collector)
        ledger.dispose()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("decisions_fleet_source_up", (("source", "ledger"),))] == 1
    assert samples[("decisions_ledger_calls", (("status", "claimed"),))] == 0
    assert samples[("decisions_ledger_jobs_unpublished", ())] == 0
    assert len(reads) == 1  # three scrapes, one read: the interval holds


def test_budgets_are_exported_by_budget(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from worker.ledger import BudgetAsk, CallOutcome

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.migrate()
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    for job_id in ("a", "b"):
        ledger.open_job(
            job_id=job_id,
            kind="decide",
            batch="night",
            reply_to="r",
            fingerprint="f",
            deadline=deadline,
            job_json="{}",
        )
        ledger.claim(
            job_id=job_id,
            step="decide",
            provider="parallel",
            model=None,
            request_sha256="s",
            lease_expires=deadline,
            budget=BudgetAsk(0.25, batch="night", batch_budget_usd=1.0),
        )
    ledger.record(
        job_id="a",
        outcome=CallOutcome(step="decide", status="answered", cost_usd=0.1, cost_basis="estimate"),
    )
    collector = FleetCollector(lambda: ledger, unreachable_redis, interval_s=3600)
    try:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in collector.collect()
            for s in f.samples
        }
    finally:
        ledger.dispose()
    night = (("budget", "batch:night"),)
    assert samples[("decisions_budget_limit_usd", night)] == 1.0
    assert samples[("decisions_budget_reserved_usd", night)] == 0.25
    assert samples[("decisions_budget_spent_usd", (("basis", "estimate"), *night))] == 0.1
    assert samples[("decisions_budget_left_usd", night)] == 0.65


def escalate(r: redis.Redis, *job_ids: str) -> None:
    for job_id in job_ids:
        message = EscalationMessage(job_id=job_id, reason="decision_refused")
        publish_once(
            r,
            stream="replies",
            job_id=job_id,
            message_type="escalation",
            message_json=message.to_json(),
            escalation=True,
        )


def as_reviewers_see(queue: EscalationQueue) -> EscalationCounts:
    found = open_escalations(queue)
    waiting = sum(1 for item in found if item.holder is None)
    return EscalationCounts(waiting=waiting, claimed=len(found) - waiting)


def test_escalations_a_trim_removed_are_not_counted_open(redis_server: OwnRedis) -> None:
    # An operator capping the stream's memory (XTRIM MAXLEN) removes entries the group still
    # holds as pending: no reviewer can open them, so no figure may count them, forever.
    with flushed(redis_server) as (r, _url):
        escalate(r, "j1", "j2", "j3", "j4")
        queue = EscalationQueue(r, on_skip=lambda _entry, _why: None)
        assert queue.claim("ann") is not None  # j1: claimed
        r.xtrim(keys.ESCALATION_STREAM, maxlen=2, approximate=False)  # j1 and j2 gone
        assert escalation_counts(r) == EscalationCounts(waiting=2, claimed=0)
        assert as_reviewers_see(queue) == EscalationCounts(waiting=2, claimed=0)
        assert escalation_counts(r) == EscalationCounts(waiting=2, claimed=0)
        r.xtrim(keys.ESCALATION_STREAM, maxlen=0, approximate=False)
        assert escalation_counts(r) == EscalationCounts(waiting=0, claimed=0)


def test_escalations_trimmed_before_any_reviewer_read_them_are_not_counted(
    redis_server: OwnRedis,
) -> None:
    # Redis's own lag for the group still counts entries a trim removed unread.
    with flushed(redis_server) as (r, _url):
        escalate(r, "j1", "j2")
        queue = EscalationQueue(r, on_skip=lambda _entry, _why: None)
        assert len(open_escalations(queue)) == 2  # handed to the group
        escalate(r, "j3", "j4", "j5")  # not read by anyone yet
        r.xtrim(keys.ESCALATION_STREAM, maxlen=1, approximate=False)  # j5 is left
        assert escalation_counts(r) == EscalationCounts(waiting=1, claimed=0)
        assert as_reviewers_see(queue) == EscalationCounts(waiting=1, claimed=0)
        assert escalation_counts(r) == EscalationCounts(waiting=1, claimed=0)
        escalate(r, "j6")  # Redis's lag stays off by the entries trimmed unread, for good
        assert escalation_counts(r) == EscalationCounts(waiting=2, claimed=0)
        assert as_reviewers_see(queue) == EscalationCounts(waiting=2, claimed=0)


def test_the_outbox_backlog_counts_only_messages_left_unpublished_past_the_relays_grace(
    tmp_path: Path,
) -> None:
    """``decisions_ledger_jobs_unpublished`` backs ``DecisionsOutboxBacklog`` (> 0 for 10
    minutes). A job is finished, then published, then marked (the mark rides on the next
    group commit): counted in that moment, a worker under steady traffic always had some,
    and the alert fired on a healthy fleet. Only a message still unpublished when the
    reaper's relay would publish it (``OUTBOX_GRACE_S`` after it finished) is backlog."""
    from datetime import UTC, datetime, timedelta

    from worker.ledger import CallOutcome
    from worker.ledger.outbox_rows import OUTBOX_GRACE_S
    from worker.observability.metrics.fleet import ledger_gauges

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    real = Ledger(url)
    real.migrate()
    ago = timedelta(seconds=OUTBOX_GRACE_S + 5)
    earlier = Ledger(url, clock=lambda: real.now() - ago)
    for job_id, ledger in (("just-finished", real), ("left-behind", earlier)):
        ledger.open_job(
            job_id=job_id, kind="decide", batch="b", reply_to="r", fingerprint="f",
            deadline=datetime.now(UTC) + timedelta(hours=1), job_json="{}",
        )
        ledger.claim(
            job_id=job_id, step="decide", provider="faux", model=None,
            request_sha256=None, lease_expires=datetime.now(UTC) + timedelta(minutes=5),
        )
        ledger.finish_job(
            job_id=job_id, message_type="result", reason=None, message_json="{}",
            outcome=CallOutcome(
                step="decide", status="answered", receipt_json="{}", outcome_json="{}",
                cost_usd=None,
            ),
        )
    try:
        assert ledger_gauges(real).jobs_unpublished == 1  # the one left past the grace
        assert real.status().jobs_unpublished == 2  # the ledger's report counts both
    finally:
        real.dispose()
        earlier.dispose()


def test_expired_claims_are_judged_by_the_ledgers_clock_not_the_workers(
    tmp_path: Path,
) -> None:
    """Leases are stamped by the ledger's clock. A worker whose own clock ran two hours
    ahead of the database's counted every claim in flight as expired, and
    ``DecisionsClaimsExpired`` fired while nothing had died."""
    from datetime import timedelta

    from worker.observability.metrics.fleet import ledger_gauges

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    behind = timedelta(hours=2)
    probe = Ledger(url)
    probe.migrate()
    ledger = Ledger(url, clock=lambda: probe.now() - behind)  # the database's time
    try:
        now = ledger.now()
        ledger.open_job(
            job_id="in-flight", kind="decide", batch="b", reply_to="r", fingerprint="f",
            deadline=now + timedelta(minutes=30), job_json="{}",
        )
        ledger.claim(
            job_id="in-flight", step="decide", provider="faux", model=None,
            request_sha256=None, lease_expires=now + timedelta(minutes=5),
        )
        gauges = ledger_gauges(ledger)
        assert (gauges.in_flight, gauges.claims_expired) == (1, 0)
    finally:
        ledger.dispose()
        probe.dispose()
