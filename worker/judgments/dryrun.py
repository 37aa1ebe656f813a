"""``decisions submit --dry-run``: the estimate as a table (or JSON), and the prices it used."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from shared.estimate import Estimate, EstimateReport, Price
from shared.settings import Settings
from worker.judgments.prices import faux_price, parse_price

__all__ = ["estimate_table", "print_report", "report_json", "worker_prices"]


def worker_prices(settings: Settings, overrides: list[str] | None = None) -> dict[str, Price]:
    """The faux's catalog prices, then each ``PROVIDER=USD[/request]`` given."""
    prices = {"faux": faux_price()}
    for text in overrides or []:
        name, price = parse_price(text)
        prices[name] = price
    return prices


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def estimate_table(estimate: Estimate, title: str) -> Table:
    table = Table(title=title)
    for column in ("provider", "requests", "input tokens", "cost", "basis", "accuracy"):
        table.add_column(column, justify="left" if column in ("provider", "basis") else "right")
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
        f"dry run: {total.jobs} job(s) valid, {len(report.rejected)} rejected; "
        f"{total.requests} request(s) after packing; nothing was sent"
    )
    console.print(estimate_table(total, "estimate"))
    for batch, estimate in sorted(report.batches.items()):
        if len(report.batches) > 1:
            console.print(estimate_table(estimate, f"batch {batch}"))
    if total.menu_jobs:
        console.print(f"{total.menu_jobs} menu job(s): their LLM turns are not estimated")
    for job_id, problems in report.rejected.items():
        listed = "; ".join(f"{p.field}: {p.message}" for p in problems)
        err_console.print(f"[yellow]rejected[/] {job_id}: {listed}")


def report_json(report: EstimateReport) -> str:
    body: dict[str, Any] = {
        "total": json.loads(report.total.to_json()),
        "batches": {name: json.loads(e.to_json()) for name, e in report.batches.items()},
        "rejected": {
            job_id: [p.as_dict() for p in problems] for job_id, problems in report.rejected.items()
        },
    }
    return json.dumps(body, indent=2, sort_keys=True)
