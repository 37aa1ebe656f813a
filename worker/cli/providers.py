"""``decisions providers``: the configured providers, their models and limits, key set or not.

One small two-column table a provider (what, value), so that it reads whole at 80 columns:
a table of every provider side by side cut every column, names too, at that width.
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from shared.settings import get_settings
from worker.cli.terminal import console
from worker.providers import ProviderRegistry

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("providers")
    def providers(
        as_json: bool = typer.Option(False, "--json", help="print a JSON array instead of tables"),
    ) -> None:
        """List providers: models, limits, and whether each key variable is set (never the key)."""
        registry = ProviderRegistry.from_settings(get_settings())
        rows = registry.describe()
        if as_json:
            typer.echo(json.dumps(rows, indent=2, default=str))
            return
        console.print(f"[bold]{len(rows)} provider(s)[/], default: {registry.default_name}")
        for row in rows:
            console.print(_provider_table(row))


def _provider_table(row: dict[str, object]) -> Table:
    name = str(row.get("name"))
    title = f"{name} (default)" if row.get("default") else name
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in row.items():
        if key in ("name", "default", "key_problem"):
            continue
        if key == "key_set" and row.get("key_problem"):
            table.add_row("key set", f"no: {row['key_problem']}")
            continue
        if isinstance(value, dict):
            for sub, limit in value.items():
                if limit is not None:
                    table.add_row(f"{key}: {sub}".replace("_", " "), _cell(limit))
            continue
        table.add_row(key.replace("_", " "), _cell(value))
    return table


def _cell(value: object) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "any"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)
