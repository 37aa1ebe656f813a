"""``decisions record --dir DIR -- COMMAND``: run a command whose providers record every
response they receive into DIR, for ``decisions faux serve --replay DIR`` and the pytest
plugin to replay in CI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import typer

from shared.settings import get_settings
from worker.cli.option_values import names, not_empty_path
from worker.cli.terminal import err_console

__all__ = ["register"]


def _snapshot(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.glob("*.json")}


def register(app: typer.Typer) -> None:
    @app.command(
        "record",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def record(
        ctx: typer.Context,
        directory: Path = typer.Option(
            ...,
            "--dir",
            file_okay=False,
            path_type=str,  # "" as typed: typer makes it Path(".")
            callback=not_empty_path,
            help="where the recordings go (created if missing)",
        ),
        secret_header: list[str] = typer.Option(
            [],
            "--secret-header",
            callback=names,
            help="a response header never to write (repeatable)",
        ),
        secret_field: list[str] = typer.Option(
            [],
            "--secret-field",
            callback=names,
            help="a JSON field path to redact, a.b.c or a.*.c (repeatable)",
        ),
    ) -> None:
        """Run COMMAND with DECISIONS_RECORD_DIR=DIR: every response a provider receives is
        saved there, one file per request digest; keys, auth headers and the secrets named
        here or in DECISIONS_SECRET_HEADERS / DECISIONS_SECRET_FIELDS never are."""
        command = list(ctx.args)
        if not command:
            err_console.print("[red]nothing to run:[/] decisions record --dir DIR -- COMMAND ...")
            raise typer.Exit(2)
        directory.mkdir(parents=True, exist_ok=True)
        settings = get_settings()
        env = dict(os.environ)
        env["DECISIONS_RECORD_DIR"] = str(directory.resolve())
        # The settings read these as JSON lists; the operator's own ones are kept.
        env["DECISIONS_SECRET_HEADERS"] = json.dumps([*settings.secret_headers, *secret_header])
        env["DECISIONS_SECRET_FIELDS"] = json.dumps([*settings.secret_fields, *secret_field])
        before = _snapshot(directory)
        try:
            returncode = subprocess.run(command, env=env, check=False).returncode
        except FileNotFoundError:
            err_console.print(f"[red]command not found:[/] {command[0]}")
            raise typer.Exit(127) from None
        except KeyboardInterrupt:
            returncode = 130
        after = _snapshot(directory)
        written = sum(1 for name, mtime in after.items() if before.get(name) != mtime)
        err_console.print(
            f"recorded {written} response(s) in {directory} ({len(after)} recording(s) in all)"
        )
        raise typer.Exit(returncode)
