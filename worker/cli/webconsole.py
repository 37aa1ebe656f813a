"""``decisions console``: serve the reviewer console (a web page for escalations and batches).

Not to be confused with ``worker.cli.terminal``, the rich terminal console of the CLI.
"""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import typer
from rich.markup import escape

from shared.errors import ConfigurationError, LedgerError
from shared.escalations import QUEUE_CONSUMER
from shared.setting_types import ConsoleUser
from shared.settings import get_settings
from worker.cli.option_values import listen_host, not_empty_path
from worker.cli.terminal import console, err_console
from worker.process.logs import configure_logging

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
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="default DECISIONS_CONSOLE_PORT"
    ),
    # An empty --host was the default host, silently (``host or settings.console_host``).
    host: str | None = typer.Option(
        None, "--host", callback=listen_host, help="default DECISIONS_CONSOLE_HOST"
    ),
) -> None:
    """Serve the console (logins from DECISIONS_CONSOLE_USERS_FILE and DECISIONS_CONSOLE_USERS)."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from worker.console import Users, create_app
    from worker.ledger import Ledger

    settings = get_settings()
    try:
        users = Users(settings.console_users, settings.console_users_file)
    except ConfigurationError as exc:
        err_console.print(f"[red]refusing to start:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if not len(users):
        err_console.print(
            "[yellow]no logins: nobody can log in[/] "
            "(add one with `decisions console add-user NAME --role reviewer`)"
        )
    ledger = Ledger.from_settings(settings)
    try:
        ledger.check_schema()
    except LedgerError as exc:
        err_console.print(f"[red]refusing to start:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        # The logins are read again here: a logins file changed since the check above is
        # refused the same way, never with a traceback.
        app = create_app(settings, ledger=ledger)
    except ConfigurationError as exc:
        err_console.print(f"[red]refusing to start:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    bind_host = host or settings.console_host
    bind_port = port or settings.console_port
    listening = _listen(bind_host, bind_port)
    console.print(f"reviewer console on http://{bind_host}:{bind_port}  (ledger {ledger.url})")
    # The console's own lines (logins, a logins file not reloaded) as the worker's are: JSON
    # off a terminal, at DECISIONS_LOG_LEVEL. uvicorn keeps its own loggers.
    configure_logging(settings.log_level, settings.log_format)
    # The client's address (each address's login throttle, the log's lines) and the scheme
    # (Secure cookies, HSTS) come from X-Forwarded-For/-Proto only when a proxy named in
    # DECISIONS_CONSOLE_TRUSTED_PROXIES sent them. uvicorn's default believed them from
    # 127.0.0.1 (or FORWARDED_ALLOW_IPS): any local client chose its own address.
    proxies = settings.console_trusted_proxies
    config = uvicorn.Config(
        app,
        host=bind_host,
        port=bind_port,
        log_level="warning",
        access_log=False,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=list(proxies),
    )
    uvicorn.Server(config).run(sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    """The console's listening socket, bound here: uvicorn reports a port in use or a host
    it cannot bind as a logged traceback and exit status 3, not as one line with the fix."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET  # "::" binds IPv6
        return socket.create_server((host, port), family=family)
    except OSError as exc:  # in use, an address not on this machine, a host that does not resolve
        why = exc.strerror or str(exc)
        err_console.print(f"[red]the console cannot listen on {host}:{port}:[/] {why}")
        err_console.print(
            "stop what listens there, or choose another --port/--host "
            "(DECISIONS_CONSOLE_PORT, DECISIONS_CONSOLE_HOST)"
        )
        raise typer.Exit(2) from None


@console_app.command("hash-password")
def hash_password_command() -> None:
    """Print the Argon2 hash of a password (typed twice, never echoed) for the users setting."""
    typer.echo(_hashed_password())


@console_app.command("add-user")
def add_user(
    name: str = typer.Argument(..., help="the login name"),
    role: str = typer.Option(
        "read_only", "--role", help="reviewer (claims and answers) or read_only (only looks)"
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        path_type=str,  # "" as typed: typer makes it Path(".")
        callback=not_empty_path,
        help="logins file (default DECISIONS_CONSOLE_USERS_FILE)",
    ),
) -> None:
    """Add a login to the logins file, or change its password and role (prompts for the
    password). A running console applies it at once; a changed password ends its sessions."""
    from worker.console.users_file import read_users_file, write_users_file

    if role not in ("reviewer", "read_only"):
        err_console.print(f"[red]--role {role!r}:[/] reviewer or read_only")
        raise typer.Exit(2)
    if not name.strip() or len(name) > 200 or name != name.strip():
        err_console.print("[red]NAME:[/] 1 to 200 characters, no leading or trailing spaces")
        raise typer.Exit(2)
    if name == QUEUE_CONSUMER:
        err_console.print(f"[red]NAME:[/] {name!r} is reserved (the queue's own consumer)")
        raise typer.Exit(2)
    path = file or get_settings().console_users_file
    try:
        users = read_users_file(path)
    except ConfigurationError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    existed = name in users
    users[name] = ConsoleUser(password_hash=_hashed_password(), role=role)
    try:
        write_users_file(path, users)
    except OSError as exc:
        err_console.print(f"[red]{path}: cannot be written ({exc.strerror})[/]")
        raise typer.Exit(1) from None
    console.print(f"{'updated' if existed else 'added'} {name} ({role}) in {path}")
    if path.resolve() != get_settings().console_users_file.resolve():
        console.print(f"the console reads it with DECISIONS_CONSOLE_USERS_FILE={path}")


def _hashed_password() -> str:
    """A password typed twice (never echoed), hashed; exit 2 if they differ or it is empty."""
    from worker.console import hash_password

    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        err_console.print("[red]the two passwords differ[/]")
        raise typer.Exit(2)
    try:
        return hash_password(first)
    except ValueError as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
