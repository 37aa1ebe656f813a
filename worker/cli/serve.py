"""Long-running commands: ``decisions worker``, ``decisions faux serve``, ``decisions migrate``."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any

import pydantic
import typer

from shared import keys
from shared.errors import ConfigurationError, SchemaAhead, SchemaBehind
from shared.settings import get_settings
from worker.cli.option_values import (
    count,
    listen_host,
    milliseconds,
    not_empty_path,
    seconds,
)
from worker.cli.startup import check_ledger_file, check_registries, pool_refusal
from worker.cli.terminal import console, err_console
from worker.ledger import Ledger
from worker.ledger.engine import describe_url

__all__ = ["register"]

faux_app = typer.Typer(help="The fake decision provider (no request leaves this machine).")
#: The options of ``decisions faux serve``, by the behaviour's field each one sets.
FAUX_OPTIONS = {
    "latency_ms": "--latency-ms",
    "mode": "--mode",
    "status_code": "--status-code",
    "retry_after_s": "--retry-after",
    "fail_first": "--fail-first",
}


def register(app: typer.Typer) -> None:
    app.add_typer(faux_app, name="faux")

    @app.command(
        "worker",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def worker(
        ctx: typer.Context,
        migrate: bool = typer.Option(False, "--migrate", help="apply ledger migrations first"),
    ) -> None:
        """Start a Celery worker with the project's defaults; extra arguments go to Celery."""
        from worker.app import app as celery_app
        from worker.app import check_visibility_timeout, pool_settings

        chosen = _pool_argument(ctx.args)
        # The command line first, before Celery imports the pool (gevent, say, may be absent).
        refused = pool_refusal(chosen) if chosen is not None else None
        if refused is not None:
            err_console.print(f"decisions worker: {refused}", markup=False)
            raise typer.Exit(2)
        settings = get_settings()
        try:
            check_visibility_timeout(settings)
            check_registries(settings)
            check_ledger_file(settings)
            ledger = Ledger.from_settings(settings)
            if migrate:
                ledger.migrate()
            ledger.check_schema()
            ledger.dispose()
        except (ConfigurationError, SchemaBehind, SchemaAhead) as exc:
            err_console.print(f"[red]refusing to start:[/] {exc}")
            raise typer.Exit(2) from None
        _pool, concurrency = pool_settings(settings)
        if chosen is not None:
            # Celery reads "--pool prefork" (its default) as "the configured pool": name it
            # in the configuration too, so an explicit pool is the pool.
            celery_app.conf.worker_pool = chosen
            concurrency = settings.worker_concurrency
        argv = [
            "worker",
            f"--queues={keys.CELERY_QUEUE}",
            f"--concurrency={concurrency}",
            f"--loglevel={settings.log_level}",
            *ctx.args,
        ]
        status = _run_celery(celery_app, argv)
        if status:
            raise typer.Exit(status)

    @app.command("migrate")
    def migrate() -> None:
        """Bring the ledger's schema up to date (Alembic)."""
        settings = get_settings()
        ledger = Ledger.from_settings(settings)
        before = ledger.current_revision()
        ledger.migrate()
        ledger.check_schema()
        after = ledger.current_revision()
        where = describe_url(settings.ledger_url)
        if before is None:
            console.print(f"created the ledger schema (revision {after}) in {where}")
        elif before != after:
            console.print(
                f"upgraded the ledger schema from revision {before} to {after} in {where}"
            )
        else:
            console.print(f"the ledger schema in {where} is up to date (revision {after})")

    @faux_app.command("serve")
    def faux_serve(
        # FauxBehaviour refuses negative and NaN values; the callbacks, what it lets through:
        # an infinite time (never answers, "Retry-After: inf"), --fail-first 0 (never
        # misbehaves), an empty --host (every interface), an empty --replay (this directory).
        host: str = typer.Option(
            "127.0.0.1", "--host", callback=listen_host, help="address to listen on"
        ),
        port: int = typer.Option(8765, "--port", min=1, max=65535, help="port to listen on"),
        latency_ms: float = typer.Option(
            0.0, "--latency-ms", callback=milliseconds, help="delay before each answer"
        ),
        mode: str = typer.Option(
            "ok",
            "--mode",
            help="ok, refuse, rate_limit, status, drop_before_read, "
            "drop_after_read, reset_after_read, garbage, deep_json, bad_probabilities",
        ),
        status_code: int | None = typer.Option(None, "--status-code", help="with --mode status"),
        retry_after: float | None = typer.Option(
            None, "--retry-after", callback=seconds, help="with --mode rate_limit or status"
        ),
        fail_first: int | None = typer.Option(
            None, "--fail-first", callback=count, help="misbehave for N requests only"
        ),
        replay: Path | None = typer.Option(
            None,
            "--replay",
            exists=True,
            file_okay=False,
            path_type=str,  # "" as typed: typer makes it Path(".")
            callback=not_empty_path,
            help="answer with the responses recorded in DIR (decisions record); "
            "an unrecorded request gets a 404 naming its digest and the closest recording",
        ),
    ) -> None:
        """Serve the fake System One / Parallel / OpenAI Decisions endpoint."""
        from worker.testing.faux import FauxBehaviour, run_forever
        from worker.testing.faux.replay import ReplayStore

        # Each is read by one mode only: elsewhere it changed nothing, silently.
        if status_code is not None and mode != "status":
            raise typer.BadParameter("only with --mode status", param_hint="'--status-code'")
        if retry_after is not None and mode not in ("rate_limit", "status"):
            raise typer.BadParameter(
                "only with --mode rate_limit or status", param_hint="'--retry-after'"
            )
        try:
            behaviour = FauxBehaviour(
                latency_ms=latency_ms,
                mode=mode,
                status_code=status_code,
                retry_after_s=retry_after,
                fail_first=fail_first,
            )
        except pydantic.ValidationError as exc:
            # The behaviour checks the values: named here by option, not by its field.
            error = exc.errors()[0]
            option = FAUX_OPTIONS.get(str(error["loc"][0]) if error["loc"] else "", "an option")
            raise typer.BadParameter(
                f"{error.get('input')}: {error['msg']}", param_hint=option
            ) from None
        if replay is not None:
            console.print(f"replaying {len(ReplayStore(replay))} recording(s) from {replay}")
        try:
            run_forever(host, port, behaviour, replay=replay)
        except OSError as exc:
            if not _cannot_listen(exc):
                raise
            # Said as `decisions console` says it (a port in use, an address not on this
            # machine, a host that does not resolve), not as the server's bind error.
            err_console.print(
                f"[red]the faux cannot listen on {host}:{port}:[/] {_listen_problem(exc)}"
            )
            err_console.print("stop what listens there, or choose another --port/--host")
            raise typer.Exit(2) from None


def _cannot_listen(exc: OSError) -> bool:
    return isinstance(exc, socket.gaierror) or exc.errno in (
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
        errno.EACCES,
    )


def _listen_problem(exc: OSError) -> str:
    # asyncio's bind error reads "error while attempting to bind on address (...): why".
    return (exc.strerror or str(exc)).rpartition("): ")[2]


def _pool_argument(args: list[str]) -> str | None:
    """The pool named by Celery arguments (``--pool X``, ``--pool=X``, ``-P X``, ``-PX``)."""
    chosen = None
    for index, arg in enumerate(args):
        if arg in ("--pool", "-P") and index + 1 < len(args):
            chosen = args[index + 1]
        elif arg.startswith("--pool="):
            chosen = arg.split("=", 1)[1]
        elif arg.startswith("-P") and len(arg) > 2:
            chosen = arg[2:]
    return chosen


def _run_celery(celery_app: Any, argv: list[str]) -> int:
    """Celery's command line on ``argv`` (``worker ...``), and the status it ended with.

    What ``Celery.worker_main`` does, but for the status: it runs the command with
    ``standalone_mode=False`` and drops what that returns, so a worker that ended on an
    "Unrecoverable error" (status 1) exited 0 and its supervisor saw a clean stop. An option
    Celery cannot parse raises click's ``UsageError``, explained by ``worker.cli.errors``.
    """
    from celery.bin.celery import celery as celery_command

    # As Celery.start: the command's --app option stands for this app while it runs.
    app_option = next(param for param in celery_command.params if param.name == "app")
    app_option.default = celery_app
    try:
        status = celery_command.main(args=argv, prog_name="decisions", standalone_mode=False)
    finally:
        app_option.default = None
    # None (or the value of a command that returned instead of exiting): a clean end.
    return status if isinstance(status, int) else 0
