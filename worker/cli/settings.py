"""``decisions settings``: every setting, its variable, default and meaning (markdown)."""

from __future__ import annotations

import typer

from worker.cli.settings_doc import settings_table

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("settings")
    def settings() -> None:
        """Print the settings table (the same as README's operator section)."""
        typer.echo(settings_table(), nl=False)
