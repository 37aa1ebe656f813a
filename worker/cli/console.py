"""The shared rich console and the figures tables the commands print."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console", "err_console"]

console = Console()
err_console = Console(stderr=True)
