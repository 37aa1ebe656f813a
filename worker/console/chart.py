"""The batch progress chart: cumulative counts over time as an SVG drawn on the server.

Only numbers and fixed labels go into the drawing (the template escapes them anyway); the
colours are CSS classes of the console's own stylesheet, so no inline style is needed and
the page's Content-Security-Policy can forbid every inline style and script.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from worker.console.figures import TimelinePoint

__all__ = ["Chart", "Series", "progress_chart"]

WIDTH: Final = 1000
HEIGHT: Final = 260
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 48, 130, 14, 30

#: (series key, legend label, css class), drawn in this order.
_SERIES: Final = (
    ("submitted", "submitted", "s-submitted"),
    ("finished", "finished", "s-finished"),
    ("result", "answered", "s-result"),
    ("escalation", "escalated", "s-escalation"),
    ("rejected", "rejected", "s-rejected"),
)


@dataclass(frozen=True)
class Series:
    label: str
    css: str
    points: str
    last: int
    last_y: float


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    series: tuple[Series, ...]
    x_ticks: tuple[tuple[float, str], ...]
    y_ticks: tuple[tuple[float, str], ...]
    plot: tuple[float, float, float, float]

    @property
    def empty(self) -> bool:
        return not self.series


def progress_chart(points: list[TimelinePoint]) -> Chart:
    left, top = float(_PAD_LEFT), float(_PAD_TOP)
    right, bottom = float(WIDTH - _PAD_RIGHT), float(HEIGHT - _PAD_BOTTOM)
    plot = (left, top, right, bottom)
    if len(points) < 2:
        return Chart(WIDTH, HEIGHT, (), (), (), plot)
    start, end = points[0].at, points[-1].at
    span = max((end - start).total_seconds(), 1e-9)
    top_count = max(1, max(p.submitted for p in points))

    def x(at: datetime) -> float:
        return left + (right - left) * (at - start).total_seconds() / span

    def y(count: int) -> float:
        return bottom - (bottom - top) * count / top_count

    series = []
    for key, label, css in _SERIES:
        counts = [_count(p, key) for p in points]
        if key not in ("submitted", "finished") and not any(counts):
            continue
        coords = " ".join(f"{x(p.at):.1f},{y(c):.1f}" for p, c in zip(points, counts, strict=True))
        series.append(Series(label, css, coords, counts[-1], y(counts[-1])))
    marks = (points[0], points[len(points) // 2], points[-1])
    x_ticks = tuple((x(p.at), _tick(p.at, start, span)) for p in marks)
    y_ticks = tuple((y(v), str(v)) for v in sorted({0, top_count // 2, top_count}))
    return Chart(WIDTH, HEIGHT, tuple(_spread(series)), x_ticks, y_ticks, plot)


def _count(point: TimelinePoint, key: str) -> int:
    if key == "submitted":
        return point.submitted
    if key == "finished":
        return point.finished
    return point.by_type.get(key, 0)


def _spread(series: list[Series], gap: float = 15.0) -> list[Series]:
    """Move legend labels apart where lines end close together."""
    placed: list[Series] = []
    for item in sorted(series, key=lambda s: s.last_y):
        y = item.last_y
        if placed and y - placed[-1].last_y < gap:
            y = placed[-1].last_y + gap
        placed.append(Series(item.label, item.css, item.points, item.last, y))
    return placed


def _tick(at: datetime, start: datetime, span_s: float) -> str:
    """Clock time (UTC) for a long run; seconds since the start for a short one."""
    if span_s >= 120:
        return at.strftime("%H:%M:%S")
    return f"+{(at - start).total_seconds():.1f} s"
