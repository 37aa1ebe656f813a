"""``decisions submit --dry-run``: the estimate as a table (or JSON), and the prices it used."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from shared.estimate import Estimate, EstimateReport
from shared.prices import Price
from shared.settings import Settings
from worker.kinds.judgments.dryrun_prices import faux_price, parse_price

__all__ = ["budget_line", "estimate_table", "print_report", "report_json", "worker_prices"]


def worker_prices(settings: Settings, overrides: list[str] | None = None) -> dict[str, Price]:
    """The faux's catalog prices (when this machine has the faux: ``worker.testing.faux`` is not
    loaded otherwise, and a job naming it is refused), then each ``PROVIDER=USD[/request]``."""
    prices = {"faux": faux_price()} if settings.faux_url or settings.faux_in_process else {}
    for text in overrides or []:
        name, price = parse_price(text)
        prices[name] = price
    return prices


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def estimate_table(estimate: Estimate, title: str | None = None) -> Table:
    # Every column folds rather than cuts ("…"): a provider's name (a System One host's may
    # be long) reads whole at 80 columns, over two lines if it must.
    table = Table(title=title)
    for column in ("provider", "requests", "input tokens", "cost", "basis", "accuracy"):
        left = column in ("provider", "basis")
        table.add_column(column, justify="left" if left else "right", overflow="fold")
    for name, entry in sorted(estimate.by_provider.items()):
        table.add_row(
            name, str(entry.requests), str(entry.input_tokens), _usd(entry.cost_usd),
            entry.basis, "-" if entry.cost_usd is None else f"±{entry.accuracy:.0%}",
        )
    total = _usd(estimate.cost_known_usd) + (" + unknown" if estimate.cost_unknown else "")
    table.add_section()
    table.add_row("total", str(estimate.requests), "", total, "", f"±{estimate.accuracy:.0%}")
    return table


def print_report(report: EstimateReport, console: Console, err_console: Console) -> None:
    total = report.total
    console.print(
        f"dry run: {total.jobs} job(s) valid, {report.rejected_count} rejected; "
        f"{total.requests} request(s) after packing; nothing was sent"
    )
    console.print(estimate_table(total, "estimate"))
    for batch, estimate in sorted(report.batches.items()):
        if len(report.batches) > 1:
            # Not the table's title: rich centres a title and breaks a long name anywhere.
            console.print(f"batch {escape(batch)}:", highlight=False)
            console.print(estimate_table(estimate))
        line = budget_line(estimate)
        if line:
            console.print(f"batch {escape(batch)}: {line}", highlight=False)
    if total.menu_jobs:
        console.print(f"{total.menu_jobs} menu job(s): their LLM turns are not estimated")
    lines = ((f"line {n}", problems) for n, problems in report.rejected_lines.items())
    named = [*report.rejected.items(), *lines]
    for where, problems in named:
        listed = "; ".join(f"{p.field}: {p.message}" for p in problems)
        err_console.print(f"[yellow]rejected[/] {escape(where)}: {escape(listed)}")


_FIT = {
    "fits": "fits its budget even at the worst case",
    "tight": "fits its budget at the estimate but not at the worst case: requests in flight "
    "at once reserve their worst case, so some may escalate budget_exhausted",
    "over": "does NOT fit its budget: part of it will escalate budget_exhausted (nothing is "
    "sent for those; raise the budget and run decisions budget resume)",
    "no_maximum": "cannot run under its budget: a provider has no known maximum price "
    "(set DECISIONS_MAX_PRICE_PER_MTOK_USD for it)",
}

#: A menu's model calls are known only as it runs: each reserves its worst case then.
_MENUS = (
    "not known before it runs: a menu job's model calls are counted as they are made, each "
    "reserving its worst case (DECISIONS_MENU_MAX_OUTPUT_TOKENS and the runtime's "
    "DECISIONS_MAX_PRICE_PER_MTOK_USD; without them a menu job cannot run under a budget), "
    "and a call the budget cannot take escalates budget_exhausted, unsent"
)


def budget_line(estimate: Estimate) -> str | None:
    """Whether the batch fits its ``budget_usd`` (None: it has none)."""
    fit = estimate.budget_fit
    if fit is None or estimate.budget_usd is None:
        return None
    worst = "unknown" if estimate.worst_usd is None else f"${estimate.worst_usd:.6f}"
    verdict = _FIT[fit]
    if fit == "no_maximum" and estimate.menu_jobs:
        verdict = _MENUS
    return (
        f"budget ${estimate.budget_usd:.6f}, estimate ${estimate.cost_known_usd:.6f}"
        f"{' + unknown' if estimate.cost_unknown else ''}, worst case {worst}: {verdict}"
    )


def report_json(report: EstimateReport) -> str:
    body: dict[str, Any] = {
        "total": json.loads(report.total.to_json()),
        "batches": {name: json.loads(e.to_json()) for name, e in report.batches.items()},
        "rejected": {
            job_id: [p.as_dict() for p in problems] for job_id, problems in report.rejected.items()
        },
        # Lines without a readable id, by line (kept apart: an id may read "line-1").
        "rejected_lines": {
            str(n): [p.as_dict() for p in problems] for n, problems in report.rejected_lines.items()
        },
    }
    return json.dumps(body, indent=2, sort_keys=True)
