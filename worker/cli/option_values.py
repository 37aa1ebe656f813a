"""Checks of command-line values that click's own types let through.

click's ``FLOAT`` takes ``nan`` and ``inf``, and a range (``min=0``) lets NaN pass, since no
comparison with it is true: a time of ``nan`` or ``inf`` seconds then failed deep inside a
command (a deadline past ``time_t``), explained as "a bug".
"""

from __future__ import annotations

import math

import typer

__all__ = ["seconds"]


def seconds(value: float | None) -> float | None:
    """An option's time in seconds: finite and not negative (a click callback)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"{value}: a number of seconds, 0 or more")
    return value
