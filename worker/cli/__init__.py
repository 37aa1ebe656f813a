"""``decisions``: the command line of decision-worker (typer + rich).

``main`` runs every verb inside one handler: an error a user or operator can cause
(a setting, a server down, a file) is printed as one or two lines by ``worker.cli.errors``,
with exit status 2 (usage, configuration) or 1 (runtime); ``--debug`` or ``DECISIONS_DEBUG``
shows the traceback instead.
"""

from __future__ import annotations

try:
    import contextlib
    import importlib
    import os
    import sys
    from collections.abc import Sequence
    from importlib.metadata import PackageNotFoundError, version
    from typing import Any

    import typer
    from typer.core import TyperGroup, TyperOption

    from worker.cli import output
    from worker.cli.terminal import err_console
except KeyboardInterrupt:  # pragma: no cover - only when Ctrl-C lands during these imports
    # The console script imports this module before ``main`` runs, so nothing else can catch
    # a Ctrl-C in its first 0.1 s: it ends as ``main`` ends one (INTERRUPTED, defined below:
    # status 130, nothing printed), not with the interpreter's traceback of the import.
    raise SystemExit(130) from None

__all__ = [
    "INTERRUPTED",
    "MODULES",
    "VERB_MODULES",
    "app",
    "build",
    "cli_command",
    "debug_wanted",
    "main",
    "verb_of",
]

#: The exit status of a command interrupted by Ctrl-C (128 + SIGINT), as typer gives it once
#: a verb runs and as shells report it.
INTERRUPTED = 130
#: The truthy spellings pydantic accepts for a bool setting (DECISIONS_DEBUG is read before
#: the settings, which may be what is wrong).
TRUE_WORDS = frozenset({"1", "true", "yes", "on", "y", "t"})

#: The modules of ``worker.cli`` that register verbs, in the order ``--help`` lists them.
MODULES = (
    "run",
    "queue",
    "serve",
    "schema",
    "providers",
    "status",
    "settings",
    "record",
    "trace",
    "escalations",
    "calibration",
    "ledger",
    "budget",
    "webconsole",
)
#: Which module registers each verb. A command imports only its own verb's module: the whole
#: command line costs over 2 s of CPU to import (SQLAlchemy, Alembic, Celery, the console),
#: and ``decisions schema`` or ``decisions escalations list`` need little of it.
VERB_MODULES = {
    "run": "run",
    "submit": "queue",
    "results": "queue",
    "worker": "serve",
    "migrate": "serve",
    "faux": "serve",
    "schema": "schema",
    "providers": "providers",
    "status": "status",
    "settings": "settings",
    "record": "record",
    "trace": "trace",
    "escalations": "escalations",
    "calibration": "calibration",
    "ledger": "ledger",
    "budget": "budget",
    "console": "webconsole",
}
#: Options of ``decisions`` itself, before the verb.
GLOBAL_FLAGS = frozenset({"--debug", "--version", "--help"})

_debug = False


def _print_version(wanted: bool) -> None:
    if wanted:
        try:
            typer.echo(f"decisions {version('decision-worker')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("decisions (not installed: version unknown)")
        raise typer.Exit()


def _print_version_now() -> None:
    with contextlib.suppress(typer.Exit):
        _print_version(True)


def _global_options(
    debug: bool = typer.Option(
        False,
        "--debug",
        help="show the traceback of an error instead of its explanation (or DECISIONS_DEBUG=1)",
    ),
    show_version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="print the version of decision-worker and exit",
    ),
) -> None:
    """Run batches of judgments through decision APIs, at most once, with escalations."""
    global _debug
    _debug = debug


def build(verb: str | None = None) -> typer.Typer:
    """The command line; given a known ``verb``, with only the module that registers it."""
    built = typer.Typer(
        name="decisions",
        help="Run batches of judgments through decision APIs, at most once, with escalations.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )
    built.callback()(_global_options)
    wanted = (VERB_MODULES[verb],) if verb in VERB_MODULES else MODULES
    for name in wanted:
        importlib.import_module(f"worker.cli.{name}").register(built)
    return built


_whole: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    # ``worker.cli.app`` (every verb) is built on first use, so that ``main`` can build less.
    global _whole
    if name == "app":
        if _whole is None:
            _whole = build()
        return _whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb a command line names: its first word that is not a global option."""
    for word in argv:
        if word in GLOBAL_FLAGS:
            continue
        return None if word.startswith("-") else word
    return None


def debug_wanted() -> bool:
    return _debug or os.environ.get("DECISIONS_DEBUG", "").strip().lower() in TRUE_WORDS


def cli_command(verb: str | None = None) -> TyperGroup:
    """The click command of ``build(verb)``: helps one line a paragraph, flags with no type."""
    command = typer.main.get_command(build(verb))
    assert isinstance(command, TyperGroup)
    _tidy(command)
    return command


def _tidy(command: Any) -> None:
    # A docstring's lines are wrapped for the source; rich would keep those breaks inside a
    # help paragraph (and show reST's double backquotes), so each paragraph is one line here.
    if command.help:
        paragraphs = command.help.replace("``", "").split("\n\n")
        command.help = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    # ``--help`` is made (and cached) on first use; made here, it is hidden like the others.
    params = [*command.params, command.get_help_option(typer.Context(command))]
    for param in params:
        # A flag takes no value: typer would show its type as ``<bool>``.
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in (getattr(command, "commands", None) or {}).values():
        _tidy(sub)


def main() -> None:
    try:
        try:
            try:
                _run(sys.argv[1:])
            finally:
                # Here, inside the handler: output a full device or a closed pipe cannot take
                # is explained (worker.cli.output), not left to the interpreter's flush at exit.
                output.flush_stdout()
        except Exception as exc:
            if debug_wanted():
                raise
            _explain(exc)
    except KeyboardInterrupt:
        # Typer turns a Ctrl-C inside a verb into status 130, quietly; one before the verb runs
        # (the command is built and its modules imported: the first second) or while an error
        # is explained reaches here, and ends the same way rather than with a traceback.
        sys.exit(INTERRUPTED)


def _run(argv: list[str]) -> None:
    verb = verb_of(argv)
    if verb is None and "--version" in argv:  # answered without building any verb
        _print_version_now()
        return
    command = cli_command(verb)
    command(prog_name="decisions")


def _explain(exc: Exception) -> None:
    from worker.cli import errors  # only when something went wrong: it imports a lot

    explanation = errors.explain(exc)
    # Standard error may be the full device too: then the status alone says it.
    with contextlib.suppress(OSError):
        for line in explanation.lines():
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    output.discard_unwritten()
    sys.exit(explanation.exit_code)
