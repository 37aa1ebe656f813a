"""``decisions``: the command line of decision-worker (typer + rich)."""

from __future__ import annotations

import typer

from worker.cli import (
    escalations,
    ledger,
    providers,
    queue,
    record,
    run,
    schema,
    serve,
    settings,
    status,
    trace,
    webconsole,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="decisions",
    help="Run batches of judgments through decision APIs, at most once, with escalations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
run.register(app)
queue.register(app)
serve.register(app)
schema.register(app)
escalations.register(app)
ledger.register(app)
providers.register(app)
status.register(app)
settings.register(app)
webconsole.register(app)
record.register(app)
trace.register(app)


def main() -> None:
    app()
