"""``decisions status``: the fleet at a glance, for an operator.

Queue depth (the broker's own count of the Celery queue), the workers answering
``celery inspect stats`` within a short timeout, calls in flight (ledger ``claimed``, and how
many of those a dead worker left behind), the outbox backlog, the escalations still open, and
the jobs submitted that no worker has taken yet (intake records, ``shared.intake``: those
older than the visibility timeout the broker may have lost; a worker's reaper republishes them).
Every figure is read, none is estimated; a source that cannot be reached is named, and the
command then exits 1.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry
from rich.table import Table

from shared.intake import IntakeBook, IntakeCounts
from shared.redis_connect import redis_client
from shared.scrub import mask_url
from shared.settings import get_settings
from worker.cli.errors import UNEXPECTED, explain
from worker.cli.option_values import wait_seconds
from worker.cli.terminal import console
from worker.ledger import Ledger
from worker.ledger.outbox_rows import OUTBOX_GRACE_S
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
from worker.process.logs import mask_passwords

__all__ = ["FleetStatus", "read_status", "register"]


@dataclass
class FleetStatus:
    broker: str
    queue: QueueDepth | None = None
    workers: list[WorkerInfo] | None = None
    ledger: LedgerGauges | None = None
    escalations: EscalationCounts | None = None
    intake: IntakeCounts | None = None
    #: Source name -> why it could not be read.
    unreachable: dict[str, str] = field(default_factory=dict)


def read_status(timeout_s: float = 1.0) -> FleetStatus:
    from worker.app import app as celery_app

    settings = get_settings()
    # shared.scrub, not kombu's maybe_sanitize_url: that shows a URL it cannot parse whole.
    status = FleetStatus(broker=mask_url(settings.broker_url, keep_user=True))
    try:
        status.queue = queue_depth(celery_app)
        status.workers = workers(celery_app, timeout_s=timeout_s)
    except Exception as exc:  # any broker failure is reported, not raised
        status.unreachable["broker"] = _why(exc)
    try:
        ledger = Ledger.from_settings(settings)
        try:
            ledger.check_schema()
            status.ledger = ledger_gauges(ledger)
        finally:
            ledger.dispose()
    except Exception as exc:
        status.unreachable["ledger"] = _why(exc)
    try:
        client = redis_client(
            settings.redis_url,
            socket_timeout=timeout_s + 1,
            socket_connect_timeout=timeout_s + 1,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            status.escalations = escalation_counts(client)
            status.intake = IntakeBook(client).counts(settings.visibility_timeout_s)
        finally:
            client.close()
    except redis.RedisError as exc:
        status.unreachable["redis"] = _why(exc)
    return status


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        timeout: float = typer.Option(
            1.0,
            "--timeout",
            callback=wait_seconds,
            help="how long to wait for workers to answer (s)",
        ),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    ) -> None:
        """Queue depth, workers, calls in flight and escalations open, fleet-wide."""
        figures = read_status(timeout)
        if as_json:
            typer.echo(json.dumps(_as_json(figures), indent=2, sort_keys=True))
        else:
            _print(figures)
        if figures.unreachable:
            raise typer.Exit(1)


def _print(s: FleetStatus) -> None:
    table = Table(title="decisions fleet", show_header=True)
    # Folded, never cut with "…": a broker URL or a reason can be longer than 80 columns.
    table.add_column("what", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    table.add_row("broker", s.broker)
    if s.queue is not None:
        table.add_row(f"queue {s.queue.queue!r}: waiting", str(s.queue.ready))
        if s.queue.unacked is not None:
            table.add_row("  delivered, not acknowledged", str(s.queue.unacked))
        if s.queue.consumers is not None:
            table.add_row("  consumers", str(s.queue.consumers))
    if s.workers is not None:
        table.add_row("workers answering", str(len(s.workers)))
    if s.ledger is not None:
        table.add_section()
        table.add_row("calls in flight (claimed)", str(s.ledger.in_flight))
        table.add_row("  of which lease expired", str(s.ledger.claims_expired))
        table.add_row("calls unknown (all time)", str(s.ledger.calls_by_status.get("unknown", 0)))
        table.add_row(
            f"terminal messages unpublished after {OUTBOX_GRACE_S:g} s",
            str(s.ledger.jobs_unpublished),
        )
    if s.escalations is not None:
        table.add_section()
        table.add_row("escalations open", str(s.escalations.open))
        table.add_row("  waiting for a reviewer", str(s.escalations.waiting))
        table.add_row("  claimed by a reviewer", str(s.escalations.claimed))
        if s.escalations.unreadable:  # not open to anyone: see decisions escalations list
            table.add_row("entries no reviewer can read", str(s.escalations.unreadable))
    if s.intake is not None:
        table.add_section()
        table.add_row("jobs submitted, not taken yet", str(s.intake.waiting))
        overdue = f"[red]{s.intake.overdue}[/]" if s.intake.overdue else "0"
        table.add_row("  older than the visibility timeout", overdue)
        if s.intake.oldest_s is not None:
            table.add_row("  oldest submitted (s ago)", f"{s.intake.oldest_s:.0f}")
    for source, why in sorted(s.unreachable.items()):
        table.add_section()
        table.add_row(f"[red]{source} unreachable[/]", why)
    console.print(table)
    if s.workers:
        listing = Table(title="workers", show_header=True)
        # Short headers, the name folded whole: the table reads at 80 columns.
        listing.add_column("name", overflow="fold")
        for column in ("conc.", "procs", "done", "up (s)"):
            listing.add_column(column, justify="right", no_wrap=True)
        for w in s.workers:
            listing.add_row(
                w.name,
                _shown(w.concurrency),
                str(w.processes),
                str(w.tasks_done),
                _shown(w.uptime_s),
            )
        console.print(listing)


def _as_json(s: FleetStatus) -> dict[str, Any]:
    data = asdict(s)
    if s.ledger is not None:
        data["ledger"]["in_flight"] = s.ledger.in_flight
    if s.escalations is not None:
        data["escalations"]["open"] = s.escalations.open
    return data


def _shown(value: object) -> str:
    return "-" if value is None else str(value)


def _why(exc: BaseException) -> str:
    # What the other verbs say of the same error (the setting and the fix) when it is a known
    # one; else the class and message only. Any URL password in it masked.
    explained = explain(exc)
    if not explained.problem.startswith(UNEXPECTED):
        return "; ".join(explained.lines())[:300]
    first = (str(exc).splitlines() or [""])[0]
    return mask_passwords(f"{type(exc).__name__}: {first}")[:300]
