"""Template filters: ages, money (an unknown cost says so, never $0), times; and what every
printed value goes through (``shown_text``, the environment's ``finalize``).

An escalation's text is a producer's: bidirectional-text controls in it (U+202E reverses
what follows, an isolate or embedding reorders it) would show a reviewer other words than
the job holds, and spill over onto the page's own text beside them. ``shown_text`` prints
each as its code point (``<U+202E>``), and any other control character too
(``shared.visible_text``, as the reviewer CLI does), on every page; a form value that must
post back as the escalation spells it (an option's name) is marked ``|verbatim`` and
printed unchanged (still escaped).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment

from shared.visible_text import visible
from worker.console.state_view import pretty_json

__all__ = [
    "Verbatim",
    "age",
    "clock",
    "install_filters",
    "interval",
    "pct",
    "shown",
    "shown_text",
    "usd",
    "verbatim",
    "when",
]

class Verbatim(str):
    """A value ``shown_text`` prints as it is (escaped all the same)."""


def verbatim(value: object) -> Verbatim:
    return Verbatim(value)


def shown_text(value: Any) -> Any:
    """What ``{{ ... }}`` prints: bidirectional-text and other controls named, not obeyed."""
    if isinstance(value, Verbatim):
        return str(value)
    if value is None or hasattr(value, "__html__") or isinstance(value, int | float):
        return value  # printed as Jinja prints them (markup the templates made stays markup)
    text = value if isinstance(value, str) else str(value)
    return visible(text)


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
    env.filters["verbatim"] = verbatim
