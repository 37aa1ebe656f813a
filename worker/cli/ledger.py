"""``decisions ledger status|unknown|reap``: reconciling what was sent and what it cost."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import typer
from rich.table import Table

from shared.settings import get_settings
from worker.cli.console import console
from worker.judgments.progress import add_estimate_rows, estimate_json, stored_estimate
from worker.ledger import Ledger

__all__ = ["register"]

ledger_app = typer.Typer(help="What the ledger holds: states, costs, unknown calls.")


def register(app: typer.Typer) -> None:
    app.add_typer(ledger_app, name="ledger")


def _ledger() -> Ledger:
    ledger = Ledger.from_settings(get_settings())
    ledger.check_schema()
    return ledger


@ledger_app.command("status")
def status(
    batch: str | None = typer.Option(None, "--batch", help="one batch only"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """Jobs by outcome, calls by state, cost by basis (with --batch: against its estimate)."""
    figures = _ledger().status(batch)
    estimate = stored_estimate(get_settings(), batch) if batch else None
    if as_json:
        body = _as_dict(figures)
        if batch:
            body["estimate"] = estimate_json(estimate)
        typer.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
        return
    table = Table(title=f"ledger{f' - batch {batch}' if batch else ''}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("jobs", str(figures.jobs_total))
    table.add_row("  open", str(figures.jobs_open))
    for key, count in sorted(figures.jobs_by_reason.items() or figures.jobs_by_type.items()):
        table.add_row(f"  {key}", str(count))
    for kind, count in sorted(figures.jobs_by_type.items()):
        table.add_row(f"  {kind} (all)", str(count))
    table.add_section()
    for state, count in sorted(figures.calls_by_status.items()):
        table.add_row(f"calls {state}", str(count))
    table.add_row("requests sent", str(figures.requests_sent))
    if figures.requests_packed:
        table.add_row("  packed (several jobs each)", str(figures.requests_packed))
    table.add_section()
    for basis, cost in sorted(figures.cost_by_basis.items()):
        shown = "unknown" if cost is None else f"${cost:.6f}"
        table.add_row(f"cost {basis}", shown)
    if batch:
        add_estimate_rows(table, figures, estimate)
    console.print(table)


@ledger_app.command("unknown")
def unknown() -> None:
    """Every call whose outcome is unknown: its job, provider, age and booked cost."""
    rows = _ledger().unknown_calls()
    table = Table(title=f"{len(rows)} unknown call(s): never sent again; each job was escalated")
    for column in ("job", "step", "provider", "model", "age", "cost", "basis", "error"):
        table.add_column(column)
    now = datetime.now(UTC)
    for call in rows:
        age = now - (call.finished_at or call.claimed_at)
        cost = "unknown" if call.cost_usd is None else f"${call.cost_usd:.6f}"
        table.add_row(
            call.job_id,
            call.step,
            call.provider,
            call.model or "",
            str(age).split(".")[0],
            cost,
            call.cost_basis or "",
            call.error_code or "",
        )
    console.print(table)


@ledger_app.command("reap")
def reap() -> None:
    """Book expired claims unknown and escalate their jobs; publish what the outbox holds.

    Workers do both periodically (DECISIONS_REAPER_INTERVAL_S)."""
    from worker import context
    from worker.reaper import reap_once, relay_outbox

    ctx = context.current()
    settled = ctx.loop.run(reap_once(ctx.ledger, ctx.runner))
    relayed = ctx.loop.run(relay_outbox(ctx.ledger, ctx.runner))
    console.print(f"escalated {settled} job(s) whose call's lease had run out")
    console.print(f"published {relayed} stored message(s) whose publish had failed")


def _as_dict(figures: object) -> dict[str, object]:
    from dataclasses import asdict, is_dataclass

    return asdict(figures) if is_dataclass(figures) and not isinstance(figures, type) else {}
