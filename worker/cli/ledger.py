"""``decisions ledger status|unknown|reap|republish``: reconciling what was sent and what it
cost, and writing a reply stream that lost its entries again from the ledger."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import typer
from rich.table import Table
from rich.text import Text

from shared import keys
from shared.redis_connect import redis_client
from shared.settings import get_settings
from shared.visible_text import visible
from worker.cli.budget import add_budget_rows, budget_json
from worker.cli.option_values import identifier, in_utc_range, time_ago
from worker.cli.terminal import console, err_console
from worker.kinds.judgments.progress import (
    add_estimate_rows,
    estimate_json,
    rejected_at_submit,
    stored_estimate,
)
from worker.ledger import CallRow, Ledger

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
    batch: str | None = typer.Option(
        None, "--batch", callback=identifier, help="one batch only"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
) -> None:
    """Jobs by outcome, calls by state, cost by basis (with --batch: against its estimate,
    and its budget: reserved, held for unknown costs, spent by basis, left)."""
    ledger = _ledger()
    figures = ledger.status(batch)
    estimate = stored_estimate(get_settings(), batch) if batch else None
    budget = ledger.budget(batch) if batch else None
    # Lines the producer refused before queueing: never in the ledger, counted beside it.
    at_submit = rejected_at_submit(get_settings(), batch) if batch else None
    lines = figures.jobs_total + at_submit if isinstance(at_submit, int) else None
    if as_json:
        body = _as_dict(figures)
        if batch:
            body["estimate"] = estimate_json(estimate)
            body["rejected_at_submit"] = at_submit
            body["lines_submitted"] = lines
            body["budget"] = budget_json(budget)
        typer.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
        return
    # Text, not markup: the batch is a producer's name ("[/]" ended the command).
    table = Table(title=Text(f"ledger{f' - batch {batch}' if batch else ''}"))
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("jobs", str(figures.jobs_total))
    table.add_row("  open", str(figures.jobs_open))
    for key, count in sorted(figures.jobs_by_reason.items() or figures.jobs_by_type.items()):
        table.add_row(f"  {key}", str(count))
    for kind, count in sorted(figures.jobs_by_type.items()):
        table.add_row(f"  {kind} (all)", str(count))
    if batch:
        shown = "Redis unreachable" if isinstance(at_submit, str) else str(at_submit)
        table.add_row("rejected at submit", shown)
        table.add_row("lines submitted", "unknown" if lines is None else str(lines))
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
        add_budget_rows(table, budget)
    console.print(table)


@ledger_app.command("unknown")
def unknown(
    as_json: bool = typer.Option(False, "--json", help="print a JSON array instead of a table"),
) -> None:
    """Every call whose outcome is unknown: its job, provider, age and booked cost."""
    rows = _ledger().unknown_calls()
    now = datetime.now(UTC)
    if as_json:
        typer.echo(json.dumps([_unknown_json(call, now) for call in rows], indent=2))
        return
    table = Table(title=f"{len(rows)} unknown call(s): never sent again; each job was escalated")
    # Five columns, the job id folded whole (never cut): it reads at 80 columns.
    table.add_column("job", overflow="fold")
    table.add_column("call", overflow="fold")
    table.add_column("age", no_wrap=True)
    table.add_column("cost", overflow="fold")
    table.add_column("error", overflow="fold")
    for call in rows:
        age = now - (call.finished_at or call.claimed_at)
        cost = "unknown" if call.cost_usd is None else f"${call.cost_usd:.6f}"
        who = f"{call.provider}/{call.model}" if call.model else call.provider
        table.add_row(
            Text(call.job_id),  # a producer's id: never read as markup
            f"{call.step} {who}",
            str(age).split(".")[0],
            f"{cost} {call.cost_basis or ''}".strip(),
            call.error_code or "",
        )
    console.print(table)


def _unknown_json(call: CallRow, now: datetime) -> dict[str, object]:
    return {
        "job_id": call.job_id,
        "step": call.step,
        "provider": call.provider,
        "model": call.model,
        "age_s": round((now - (call.finished_at or call.claimed_at)).total_seconds(), 3),
        "cost_usd": call.cost_usd,
        "cost_basis": call.cost_basis,
        "error_code": call.error_code,
    }


@ledger_app.command("reap")
def reap() -> None:
    """Book expired claims unknown and escalate their jobs; publish what the outbox holds.

    Workers do both periodically (DECISIONS_REAPER_INTERVAL_S)."""
    from worker.process import context
    from worker.recovery.reaper import reap_once, relay_outbox

    ctx = context.current()
    settled = ctx.loop.run(reap_once(ctx.ledger, ctx.runner))
    relayed = ctx.loop.run(relay_outbox(ctx.ledger, ctx.runner))
    console.print(f"escalated {settled} job(s) whose call's lease had run out")
    console.print(f"published {relayed} stored message(s) whose publish had failed")


def _checked_since(value: str | None) -> str | None:
    # Read as it is parsed too (a callback): a bad one is refused before anything is opened,
    # and click names the option in the refusal; an empty one was no --since at all.
    if value is not None:
        _since(value)
    return value


@ledger_app.command("republish")
def republish(
    stream: str = typer.Option(..., "--stream", help="the reply stream (a job's reply_to)"),
    since: str | None = typer.Option(
        None,
        "--since",
        callback=_checked_since,
        help="only jobs finished since: ISO 8601 (UTC if no zone) or 30m, 6h, 2d",
    ),
) -> None:
    """Write again, from the ledger, the terminal messages a reply stream lost (and its open
    escalations to the escalation stream); each at most once, however often it runs."""
    from worker.recovery.republish import republish_stream

    if not keys.is_reply_name(stream):
        err_console.print(f"[red]--stream: {keys.reply_to_problem(stream)}[/]", highlight=False)
        raise typer.Exit(2)
    start = _since(since) if since else None
    settings = get_settings()
    report = republish_stream(
        _ledger(),
        redis_client(settings.redis_url),
        stream,
        since=start,
        ttl_s=settings.publish_marker_ttl_s,
    )
    console.print(
        f"{report.jobs} finished job(s) reply to {stream!r}: wrote {report.replies} message(s) "
        f"the stream lacked, {report.escalations} escalation(s) to the escalation stream",
        highlight=False,
    )
    for failure in report.failures[:10]:
        err_console.print(Text(visible(str(failure)), "red"))
    if report.failures:
        err_console.print(f"[red]{len(report.failures)} message(s) could not be written[/]")
        raise typer.Exit(1)


_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _since(text: str) -> datetime:
    ago = _AGO.match(text.strip())
    if ago:
        return time_ago(text, seconds=float(ago[1]) * _UNITS[ago[2]])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: an ISO 8601 time (2026-05-01T12:00) or an age (30m, 6h, 2d)"
        ) from None
    return in_utc_range(text, moment)


def _as_dict(figures: object) -> dict[str, object]:
    from dataclasses import asdict, is_dataclass

    return asdict(figures) if is_dataclass(figures) and not isinstance(figures, type) else {}
