"""Checks of command-line values that click's own types let through (typer callbacks).

click's ``FLOAT`` takes ``nan`` and ``inf``, and a range (``min=0``) lets NaN pass, since no
comparison with it is true: a time of ``nan`` or ``inf`` seconds then failed deep inside a
command (a deadline past ``time_t``), explained as "a bug"; so did a finite time past year
9999 or past what a socket's timeout holds (1e10 s). Its ``INT`` and ``STR`` take any count
and any text, and a command read a meaningless one as something else, silently: a
``--chunk-size`` of 0 as the default and of -5 as 1, an empty ``--batch`` as every batch,
an empty ``--reviewer`` as the default one, an empty ``--host`` as every interface, an empty
path as the current directory. Each check refuses such a value as it is parsed, before the
command does anything, naming the option and what it takes (``typer.BadParameter``: usage,
exit status 2); a value that meant something before means the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from shared.ledger_text import no_control_characters
from shared.limits import MAX_ID_CHARS
from shared.setting_types import MAX_SECONDS

__all__ = [
    "MAX_WAIT_SECONDS",
    "count",
    "identifier",
    "in_utc_range",
    "listen_host",
    "milliseconds",
    "name",
    "names",
    "non_negative",
    "not_empty_path",
    "reviewer",
    "seconds",
    "time_ago",
    "wait_seconds",
]


def seconds(value: float | None) -> float | None:
    """An option's time in seconds: 0 to ``MAX_SECONDS`` (ten years), as a setting's."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
        raise typer.BadParameter(
            f"{value}: a number of seconds, 0 to {MAX_SECONDS:,} (ten years)"
        )
    return value


#: The longest a socket wait can be: ``poll`` takes its timeout in milliseconds as a C int
#: (kombu's wait for workers' replies raised "OverflowError: timeout is too large").
MAX_WAIT_SECONDS = (2**31 - 1) // 1000


def wait_seconds(value: float | None) -> float | None:
    """A time to wait on a socket: 0 to ``MAX_WAIT_SECONDS`` (about 24 days)."""
    seconds(value)
    if value is not None and value > MAX_WAIT_SECONDS:
        raise typer.BadParameter(
            f"{value}: a number of seconds, 0 to {MAX_WAIT_SECONDS:,} (about 24 days: the "
            "longest a wait on the broker can be)"
        )
    return value


def milliseconds(value: float | None) -> float | None:
    """An option's time in milliseconds: as ``seconds`` (``inf`` waited for ever)."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_SECONDS * 1000):
        raise typer.BadParameter(
            f"{value}: a number of milliseconds, 0 to {MAX_SECONDS * 1000:,} (ten years)"
        )
    return value


def non_negative(value: float | None) -> float | None:
    """A finite number, 0 or more: a negative bound means what 0 does, NaN and inf nothing."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"{value}: a number, 0 or more")
    return value


def count(value: int | None) -> int | None:
    """A number of things: a whole number, 1 or more."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"{value}: a whole number, 1 or more")
    return value


def _text_problem(value: str) -> str | None:
    """Why ``value`` names nothing: empty, only spaces, or a control character in it (a
    job's names have none: ``shared.ledger_text``)."""
    if not value.strip():
        return "is empty" if not value else "is only spaces"
    try:
        no_control_characters(value)
    except ValueError:
        return "holds a control character"
    return None


def name(value: str | None) -> str | None:
    """A name (a provider, model, question, reason): text, not only spaces, no control
    characters. An empty filter was read as no filter at all."""
    problem = None if value is None else _text_problem(value)
    if problem is not None:
        raise typer.BadParameter(
            f"{value!r} {problem}: a name (not only spaces, no control characters)"
        )
    return value


def names(values: Sequence[str] | None) -> Sequence[str] | None:
    """``name`` for each value of a repeatable option: an empty secret header or field
    matches nothing, so the secret meant was written."""
    for value in values or ():
        name(value)
    return values


def identifier(value: str | None) -> str | None:
    """A batch name or job id as a job can have one: 1 to ``MAX_ID_CHARS`` characters, not
    only spaces, no control characters. Any other names no batch or job (and a budget set
    for it never applies)."""
    if value is None:
        return value
    problem = _text_problem(value)
    if problem is None and len(value) > MAX_ID_CHARS:
        problem = f"is {len(value)} characters long"
    if problem is not None:
        raise typer.BadParameter(
            f"{value[:40]!r} {problem}: 1 to {MAX_ID_CHARS} characters, not only spaces, "
            "no control characters"
        )
    return value


def reviewer(value: str | None) -> str | None:
    """A reviewer's name: a ``name``, and not the escalation queue's own consumer (which
    was "a bug": the queue's ValueError)."""
    # Imported here: shared.escalations brings Redis's client, which most verbs never need.
    from shared.escalations import QUEUE_CONSUMER

    name(value)
    if value == QUEUE_CONSUMER:
        raise typer.BadParameter(f"{value!r} is reserved (the escalation queue's own name)")
    return value


def listen_host(value: str | None) -> str | None:
    """An address to listen on: an empty one was every interface (or the default host)."""
    if value is not None and not value.strip():
        raise typer.BadParameter(
            f"{value!r}: a host name or address (0.0.0.0 for every interface)"
        )
    return value


def not_empty_path(value: str | Path | None) -> Path | None:
    """A path, given as typed (``path_type=str``): typer makes ``""`` into ``Path(".")``, and
    an empty --out or --dir wrote into the current directory."""
    if value is None:
        return None
    if str(value) == "":
        raise typer.BadParameter("'' is empty: a path (. for the current directory)")
    return Path(value)


def time_ago(value: str, **age: float) -> datetime:
    """Now (UTC) less ``age`` (``timedelta``'s keywords), the time a ``--since`` age
    ``value`` names; one before year 1 was "a bug" (OverflowError)."""
    try:
        return datetime.now(UTC) - timedelta(**age)
    except OverflowError:
        raise typer.BadParameter(f"{value!r}: an age back to year 1 at most") from None


def in_utc_range(value: str, moment: datetime) -> datetime:
    """``moment`` (in UTC if it names no zone), the time a ``--since`` ``value`` names. The
    ledger compares in UTC: a time before year 1 or after 9999 there (0001-01-01T00:00+01:00)
    failed in the query, as "a bug" (OverflowError)."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        moment.astimezone(UTC)
    except OverflowError:
        raise typer.BadParameter(f"{value!r}: a time in the years 1 to 9999, in UTC") from None
    return moment
