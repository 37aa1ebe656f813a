"""What the deployment files are checked against: the project's own commands and settings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from shared.settings import Settings
from worker.cli import app as decisions_app
from worker.cli.settings_doc import env_names

__all__ = [
    "ROOT",
    "check_celery_command",
    "check_decisions_command",
    "duration_s",
    "setting_variables",
]

ROOT = Path(__file__).parents[2]


def setting_variables() -> set[str]:
    """Every environment variable a Settings field is read from."""
    return {v for name, info in Settings.model_fields.items() for v in env_names(name, info)}


def _subcommands(command: Any) -> dict[str, Any] | None:
    # Typer vendors its own click: groups are recognised by their commands, not their class.
    commands = getattr(command, "commands", None)
    return commands if isinstance(commands, dict) else None


def _resolve(group: Any, args: list[str], prog: str) -> None:
    """Parse ``args`` as the command line would, without running anything."""
    command = group
    rest = list(args)
    path = [prog]
    while (subs := _subcommands(command)) is not None:
        if getattr(command, "invoke_without_command", False) and (
            not rest or rest[0].startswith("-")
        ):
            break  # a group that runs itself (`decisions console --port N`)
        assert rest and not rest[0].startswith("-"), f"{' '.join(path)}: which subcommand?"
        name = rest.pop(0)
        assert name in subs, f"{' '.join(path)} has no command {name!r}"
        path.append(name)
        command = subs[name]
    # Raises a usage error for an unknown option or a bad value.
    command.make_context(" ".join(path), rest)


def check_decisions_command(args: list[str]) -> None:
    """``decisions ARGS`` names a real command with options it accepts."""
    _resolve(typer.main.get_command(decisions_app), args, "decisions")


def check_celery_command(args: list[str]) -> None:
    """``celery ARGS``: its global options, then a subcommand Celery (or a plugin) has."""
    from celery.bin.celery import celery

    rest = list(args)
    options = {n: p for p in celery.params for n in getattr(p, "opts", [])}
    while rest and rest[0].startswith("-"):
        option, _, inline = rest.pop(0).partition("=")
        assert option in options, f"celery has no global option {option!r}"
        if not inline and not getattr(options[option], "is_flag", False):
            rest.pop(0)  # the option's value
    assert rest, "celery: no subcommand"
    sub = celery.commands.get(rest[0])  # type: ignore[attr-defined]
    assert sub is not None, f"celery has no subcommand {rest[0]!r} (is its plugin installed?)"
    from celery.bin.base import CLIContext

    from worker.app import app

    context = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    sub.make_context(f"celery {rest[0]}", rest[1:], obj=context)


def duration_s(value: Any) -> float:
    """A Compose duration (``1050s``, ``17m30s``, ``1h``) in seconds."""
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value))
    assert parts and "".join(n + u for n, u in parts) == str(value), f"bad duration {value!r}"
    return sum(float(n) * units[u] for n, u in parts)
