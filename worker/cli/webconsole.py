"""``decisions console``: serve the reviewer console (a web page for escalations and batches).

Not to be confused with ``worker.cli.console``, the rich terminal console of the CLI.
"""

from __future__ import annotations

import getpass

import typer

from shared.errors import LedgerError
from shared.settings import get_settings
from worker.cli.console import console, err_console

__all__ = ["register"]

console_app = typer.Typer(
    help="The reviewer console: escalations and batches in a browser.",
    invoke_without_command=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(console_app, name="console")


@console_app.callback()
def serve(
    ctx: typer.Context,
    port: int | None = typer.Option(None, "--port", help="default DECISIONS_CONSOLE_PORT"),
    host: str | None = typer.Option(None, "--host", help="default DECISIONS_CONSOLE_HOST"),
) -> None:
    """Serve the console (logins from DECISIONS_CONSOLE_USERS)."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from worker.console import create_app
    from worker.ledger import Ledger

    settings = get_settings()
    if not settings.console_users:
        err_console.print(
            "[yellow]no DECISIONS_CONSOLE_USERS: nobody can log in[/] "
            "(make a hash with `decisions console hash-password`)"
        )
    if settings.console_secret_key is None:
        err_console.print(
            "[yellow]no DECISIONS_CONSOLE_SECRET_KEY: a random one, sessions end on restart[/]"
        )
    ledger = Ledger.from_settings(settings)
    try:
        ledger.check_schema()
    except LedgerError as exc:
        err_console.print(f"[red]refusing to start:[/] {exc}")
        raise typer.Exit(2) from None
    app = create_app(settings, ledger=ledger)
    bind_host = host or settings.console_host
    bind_port = port or settings.console_port
    console.print(f"reviewer console on http://{bind_host}:{bind_port}  (ledger {ledger.url})")
    uvicorn.run(app, host=bind_host, port=bind_port, log_level="warning", access_log=False)


@console_app.command("hash-password")
def hash_password_command() -> None:
    """Print the Argon2 hash of a password (typed twice, never echoed) for the users setting."""
    from worker.console import hash_password

    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        err_console.print("[red]the two passwords differ[/]")
        raise typer.Exit(2)
    try:
        typer.echo(hash_password(first))
    except ValueError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
