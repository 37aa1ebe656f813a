"""The shared rich console and the figures tables the commands print."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console", "err_console"]

console = Console()
# Error lines are never folded by rich (the terminal wraps them itself): a folded line cut
# a file path in two, which a user then could not copy.
err_console = Console(stderr=True, soft_wrap=True)
