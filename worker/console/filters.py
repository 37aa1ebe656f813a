"""Template filters: ages, money (an unknown cost says so, never $0), times."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment

from worker.console.state_view import pretty_json

__all__ = ["age", "clock", "install_filters", "interval", "pct", "shown", "usd", "when"]


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"${value:,.6f}" if value < 1 else f"${value:,.2f}"


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def shown(value: object) -> str:
    """A machine's answer value: yes/no for a boolean, the value otherwise."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def clock(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%H:%M:%S.%f")[:-3]


def pct(value: float | None) -> str:
    """A share as a percentage, one decimal; "-" when unknown."""
    return "-" if value is None else f"{value * 100:.1f}%"


def interval(value: Any) -> str:
    """A ``shared.calibration.Interval``'s bounds, "[a, b]" in percent; "" when unknown."""
    low, high = getattr(value, "low", None), getattr(value, "high", None)
    if low is None or high is None:
        return ""
    return f"[{low * 100:.1f}, {high * 100:.1f}]"


def install_filters(env: Environment) -> None:
    env.filters["pct"] = pct
    env.filters["interval"] = interval
    env.filters["clock"] = clock
    env.filters["pretty"] = pretty_json
    env.filters["shown"] = shown
    env.filters["age"] = age
    env.filters["usd"] = usd
    env.filters["when"] = when
