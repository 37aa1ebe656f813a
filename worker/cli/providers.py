"""``decisions providers``: the configured providers, their models and limits, key set or not."""

from __future__ import annotations

import typer
from rich.table import Table

from shared.settings import get_settings
from worker.cli.console import console
from worker.providers import ProviderRegistry

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("providers")
    def providers() -> None:
        """List providers: models, limits, and whether each key variable is set (never the key)."""
        registry = ProviderRegistry.from_settings(get_settings())
        rows = registry.describe()
        table = Table(title=f"providers (default: {registry.default_name})")
        columns = list(rows[0]) if rows else []
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_cell(row.get(column)) for column in columns))
        console.print(table)


def _cell(value: object) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "any"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
    return "" if value is None else str(value)
