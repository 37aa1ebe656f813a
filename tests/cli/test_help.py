"""``decisions --help`` and every command's: each option says what it does, a flag shows no
``<bool>`` type, and ``--version`` answers."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperArgument, TyperOption

from tests.cli.support import decisions
from worker.cli import cli_command

#: Options whose help belongs to a module another change is editing; each must leave this
#: list when it gets its help (the test fails while a listed option has one).
WITHOUT_HELP_YET: set[tuple[str, str]] = set()


def _commands(command: Any, path: str = "") -> Iterator[tuple[str, Any, typer.Context]]:
    ctx = typer.Context(command, info_name=path or "decisions")
    yield path, command, ctx
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, f"{path} {name}".strip())


def _options(command: Any, ctx: typer.Context) -> list[TyperOption]:
    return [p for p in command.get_params(ctx) if isinstance(p, TyperOption) and not p.hidden]


def test_every_option_has_help_and_no_flag_shows_a_bool_type() -> None:
    missing, bools = [], []
    for path, command, ctx in _commands(cli_command()):
        params = [
            *_options(command, ctx),
            *(p for p in command.params if isinstance(p, TyperArgument)),
        ]
        for param in params:
            name = param.opts[0] if isinstance(param, TyperOption) else str(param.name)
            listed = (path, name) in WITHOUT_HELP_YET
            if not param.help and not listed:
                missing.append((path, name))
            if param.help and listed:
                missing.append((path, f"{name} has help now: take it off the list"))
            if isinstance(param, TyperOption) and "bool" in (param.display_type_rich(ctx) or ""):
                bools.append((path, name))
    assert not missing, missing
    assert not bools, bools


def test_the_help_as_printed_has_no_bool(tmp_path: Path) -> None:
    for args in (("--help",), ("run", "--help"), ("submit", "--help")):
        done = decisions(*args, cwd=tmp_path)
        assert done.code == 0, done.output
        assert "<bool>" not in done.stdout, done.stdout
    assert "--debug" in decisions("--help", cwd=tmp_path).stdout


def test_version(tmp_path: Path) -> None:
    done = decisions("--version", cwd=tmp_path)
    assert done.code == 0
    assert done.stdout.strip() == f"decisions {version('decision-worker')}"


def test_every_verb_is_built_by_its_own_module_alone() -> None:
    """A command builds only its verb's module; each verb of the whole line is found so."""
    from worker.cli import VERB_MODULES

    whole = set(cli_command().commands)
    assert whole == set(VERB_MODULES), "a verb is missing from VERB_MODULES"
    for verb in whole:
        assert verb in cli_command(verb).commands, verb


_LIGHT = """
import sys
sys.argv = ["decisions", "--debug", "schema", "job"]
from worker.cli import main
try:
    main()
except SystemExit:
    pass
print(sorted(m for m in ("sqlalchemy", "alembic", "celery", "worker.console") if m in sys.modules))
"""


def test_a_light_verb_does_not_import_the_heavy_parts() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LIGHT], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


def test_help_paragraphs_flow_and_show_no_rest_markup() -> None:
    """A docstring wrapped for the source is not shown with its breaks (rich keeps them)."""
    broken = [
        path
        for path, command, _ in _commands(cli_command())
        if "``" in (command.help or "")
        or any("\n" in p for p in (command.help or "").split("\n\n"))
    ]
    assert broken == []
