"""What ``decisions`` prints instead of a traceback: an exception becomes one or two lines.

``worker.cli.main`` wraps every verb in one handler that calls ``explain``. The first line
names the problem and where it comes from (the ``DECISIONS_*`` variable, the file and line,
the server), the second the fix. Exit status ``USAGE`` (2) when the fix is a setting, an
argument or a file; ``RUNTIME`` (1) when something the command needs failed (a server down)
and the same command may work later. ``decisions --debug`` or ``DECISIONS_DEBUG=1`` shows
the traceback instead. The servers' errors are explained in ``worker.cli.connection_errors``;
this module explains the settings, the project's own errors, files and option values.
"""

from __future__ import annotations

import errno
import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import click
import pydantic
from pydantic_settings import SettingsError

from shared.errors import (
    ConfigurationError,
    DecisionWorkerError,
    SchemaAhead,
    SchemaBehind,
    SubmitFailed,
)
from shared.scrub import mask_url
from shared.settings import Settings
from worker.cli import output
from worker.cli.connection_errors import CONNECTION_HANDLERS
from worker.cli.explanation import (
    RUNTIME,
    USAGE,
    Explanation,
    masked,
    setting_url,
    setting_variable,
)
from worker.ledger.errors import TablesMissing

__all__ = ["RUNTIME", "UNEXPECTED", "USAGE", "Explanation", "explain"]

#: The optional extras (pyproject.toml), by the top-level modules they install: a command
#: that needs one that is missing says what to install, in one line.
EXTRAS = {
    "starlette": "console",
    "uvicorn": "console",
    "jinja2": "console",
    "multipart": "console",
    "python_multipart": "console",
    "itsdangerous": "console",
    "argon2": "console",
    "prometheus_client": "metrics",
    "PIL": "images",
    "opentelemetry": "otel",
    "pytest": "testing",
}

#: Functions that parse a command-line value, and the option whose value they parse: a
#: ``ValueError`` raised in one of them is a usage error of that option.
OPTION_PARSERS = {"parse_price": "--price"}
#: What a write fails with when the device cannot take it: full, over quota, too large, or
#: failing.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
#: How the explanation of an error nobody foresaw begins.
UNEXPECTED = "unexpected error"
DEBUG_HINT = "decisions --debug ... (or DECISIONS_DEBUG=1) shows the traceback"


def explain(exc: BaseException) -> Explanation:
    """The lines and exit status for ``exc``; anything unforeseen is a bug to report."""
    for kinds, handler in _HANDLERS:
        if isinstance(exc, kinds):
            found = handler(exc)
            if found is not None:
                return found
    return Explanation(
        f"{UNEXPECTED}: {type(exc).__name__}: {masked(str(exc))}",
        f"this is a bug in decisions; {DEBUG_HINT}; please report it",
        RUNTIME,
    )


# --- settings ----------------------------------------------------------------------------


def _settings_invalid(exc: pydantic.ValidationError) -> Explanation | None:
    if exc.title != Settings.__name__:
        return None
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if not loc:
            problems.append(error["msg"].removeprefix("Value error, "))
            continue
        variable = setting_variable(loc[0])
        where = ".".join(loc[1:])
        value = "" if _is_secret(loc[0]) else f"={_shown(error.get('input'))}"
        path = f" ({where})" if where else ""
        problems.append(f"{variable}{value}{path}: {error['msg'].removeprefix('Value error, ')}")
    return Explanation(
        "; ".join(problems),
        "fix the variable (in the environment or .env) or unset it for its default "
        "(`decisions settings` lists every setting)",
    )


def _shown(value: object) -> str:
    # A text through mask_url first: a URL that does not parse (redis:/:pw@host) is no URL
    # to the running-text masking, and was shown whole.
    text = mask_url(value, keep_user=True) if isinstance(value, str) else value
    return masked(repr(text))


def _settings_unparsable(exc: SettingsError) -> Explanation:
    match = re.search(r'field "([^"]+)"', str(exc))
    variable = setting_variable(match.group(1)) if match else "a DECISIONS_* variable"
    return Explanation(
        f"{variable} is not valid JSON",
        "write it as JSON (`decisions settings` shows each setting's shape), or unset it",
    )


def _is_secret(field: str) -> bool:
    info = Settings.model_fields.get(field)
    return info is not None and "Secret" in str(info.annotation)


# --- the project's own errors ------------------------------------------------------------


def _schema_behind(exc: SchemaBehind) -> Explanation:
    if isinstance(exc, TablesMissing):
        # Never migrated, or dropped: the same error, not the same fix. A dropped ledger took
        # with it the claims that kept calls from being sent twice; migrating a new one
        # silently promised what no longer holds (an attack followed the hint and got every
        # call in flight sent twice).
        # The error's own advice ("run `decisions migrate`") is the fix line's first half.
        said = str(exc).removesuffix(": run `decisions migrate`")
        return Explanation(
            f"the ledger at DECISIONS_LEDGER_URL={setting_url('ledger_url')} has no tables: {said}",
            "a new ledger: run `decisions migrate`; tables dropped under running workers: "
            "restore them from a backup, as with new ones a call in flight when they went may "
            "be sent, and paid for, again",
        )
    return Explanation(
        f"the ledger's schema is behind this code: {exc}",
        "run `decisions migrate` against DECISIONS_LEDGER_URL",
    )


def _submit_failed(exc: SubmitFailed) -> Explanation:
    # Explained as the error that stopped it (the broker down: the same one or two lines), and
    # when some jobs went out before it, how many: the rest were not queued and no reaper
    # queues them later (shared.chunk_publisher.MessageSender).
    cause = exc.__cause__
    found = explain(cause) if cause is not None else _project_error(exc)
    rejected = len(exc.rejected) + len(exc.rejected_lines)
    if not exc.queued and not rejected:
        return found
    # Not "of how many": the lines after the failure were never read.
    again = "submitting the same file again is safe: a job id runs once"
    went = f"{len(exc.queued)} job(s) were queued"
    if rejected:
        went += f" and {rejected} rejected (their rejected messages are on the stream)"
    return Explanation(
        f"{found.problem}; {went} before it failed",
        f"{found.fix}; {again}" if found.fix else again,
        found.exit_code,
    )


def _configuration(exc: ConfigurationError) -> Explanation:
    return Explanation(masked(str(exc)))


def _schema_ahead(exc: SchemaAhead) -> Explanation:
    # Exit 2, a configuration's: this release against a ledger a newer one migrated.
    return Explanation(masked(str(exc)), None, USAGE)


def _project_error(exc: DecisionWorkerError) -> Explanation:
    return Explanation(masked(str(exc)), None, RUNTIME)


def _missing_extra(exc: ModuleNotFoundError) -> Explanation | None:
    extra = EXTRAS.get((exc.name or "").partition(".")[0])
    if extra is None:
        return None
    return Explanation(
        f"this command needs the [{extra}] extra ({exc.name} is not installed)",
        f"pip install 'decision-worker[{extra}]'",
    )


# --- files and command-line values ---------------------------------------------------------


def _not_utf8(exc: UnicodeDecodeError) -> Explanation:
    path = _file_being_read(exc.__traceback__)
    if path is None:
        return Explanation(f"a file is not UTF-8: {exc}", "save it as UTF-8")
    line, column = _undecodable_at(path, exc.encoding)
    byte = exc.object[exc.start : exc.start + 1].hex()
    where = f"{path} line {line}, column {column}" if line else str(path)
    # What the file holds, by its name: a settings file (.env) is no file of jobs (found by
    # an attack: a .env was told "each line one JSON job").
    name = Path(path).name
    holds = "NAME=value" if name == ".env" or name.endswith(".env") else "one JSON job"
    return Explanation(
        f"{where}: byte 0x{byte} is not {exc.encoding.upper()}",
        f"save the file as UTF-8 (each line {holds})",
    )


def _write_error(exc: OSError) -> Explanation | None:
    """A write that no file name goes with: the output's (``>/dev/full``, ``| head -1``)."""
    if exc.filename is not None:
        return None
    if exc.errno == errno.EPIPE and output.stdout_reader_gone():
        # The reader had what it wanted: nothing to say, as other tools say nothing.
        return Explanation("", None, RUNTIME)
    if exc.errno in WRITE_ERRNOS:
        return Explanation(f"decisions: write error: {exc.strerror or exc}", None, RUNTIME)
    return None


def _file_error(exc: OSError) -> Explanation | None:
    if exc.errno == errno.EADDRINUSE:
        return Explanation(
            f"the address is in use: {exc.strerror}",
            "stop what listens there, or choose another --port",
        )
    if exc.filename is None:
        return None
    path_problem = exc.errno in (
        errno.ENOENT,
        errno.EACCES,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.EEXIST,
        errno.EROFS,
    )
    return Explanation(
        f"{exc.filename}: {exc.strerror or exc}",
        "check the path and its permissions" if path_problem else None,
        USAGE if path_problem else RUNTIME,
    )


def _option_value(exc: ValueError) -> Explanation | None:
    for frame in _frames(exc.__traceback__):
        option = OPTION_PARSERS.get(frame.f_code.co_name)
        if option:
            return Explanation(
                f"{option}: {exc}",
                f"see `decisions COMMAND --help` for the form of {option}",
            )
    return None


def _usage(exc: click.UsageError) -> Explanation:
    # A verb's own options are checked by click, which prints their errors itself; one that
    # gets here is from a command line parsed inside a verb: Celery's, to which `decisions
    # worker` hands the options it does not know (an unknown one, a bad pool or number).
    command = exc.ctx.command_path if exc.ctx is not None else "decisions"
    celery = "; the others are Celery's (`celery worker --help`)" if "worker" in command else ""
    return Explanation(
        f"{command}: {exc.format_message()}", f"`{command} --help` lists its options{celery}"
    )


def _timed_out(exc: TimeoutError) -> Explanation:
    return Explanation(f"gave up waiting: {exc}", None, RUNTIME)


def _frames(tb: TracebackType | None) -> Iterator[Any]:
    """The traceback's frames, innermost first."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return reversed(frames)


def _file_being_read(tb: TracebackType | None) -> Path | None:
    # The decode error carries no file name; the reading code holds the open text file in a
    # local variable (``handle`` in worker.cli.jsonl, ``f`` in Path.read_text, ...).
    for frame in _frames(tb):
        for value in frame.f_locals.values():
            if isinstance(value, io.TextIOWrapper) and isinstance(value.name, str):
                return Path(value.name)
    return None


def _undecodable_at(path: Path, encoding: str) -> tuple[int, int]:
    """The 1-based line and column of the first byte ``encoding`` cannot decode (0, 0 if
    the file cannot be read again)."""
    try:
        data = path.read_bytes()
    except OSError:
        return 0, 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        try:
            line.decode(encoding)
        except UnicodeDecodeError as error:
            return number, len(line[: error.start].decode(encoding, "replace")) + 1
    return 0, 0


_HANDLERS: list[tuple[Any, Callable[[Any], Explanation | None]]] = [
    (pydantic.ValidationError, _settings_invalid),
    (SettingsError, _settings_unparsable),
    (SchemaBehind, _schema_behind),
    (SchemaAhead, _schema_ahead),
    (SubmitFailed, _submit_failed),
    (ConfigurationError, _configuration),
    (ModuleNotFoundError, _missing_extra),
    *CONNECTION_HANDLERS,
    (UnicodeDecodeError, _not_utf8),
    (ValueError, _option_value),
    (click.UsageError, _usage),
    (DecisionWorkerError, _project_error),
    (OSError, _write_error),
    (OSError, _file_error),
    (TimeoutError, _timed_out),
]
