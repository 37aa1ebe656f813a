"""The reliability diagram: observed accuracy against the machine's stated probability, per
bin, as an SVG drawn on the server (as the batch chart, ``chart``: numbers and fixed labels
only, colours from the stylesheet's classes, so the page's CSP forbids inline styles).

The diagonal is perfect calibration; each bin is a dot at (mean stated probability,
observed accuracy) with its Wilson interval as a vertical bar, its area following its labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from shared.calibration import Bin

__all__ = ["Diagram", "Dot", "reliability_diagram"]

SIZE: Final = 300
_PAD: Final = 36


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    low_y: float
    high_y: float
    r: float
    title: str


@dataclass(frozen=True)
class Diagram:
    size: int
    plot: tuple[float, float, float, float]
    ticks: tuple[tuple[float, str], ...]
    dots: tuple[Dot, ...]

    @property
    def empty(self) -> bool:
        return not self.dots


def reliability_diagram(bins: list[Bin]) -> Diagram:
    left, top = float(_PAD), 10.0
    right, bottom = float(SIZE - 10), float(SIZE - _PAD + 10)
    span_x, span_y = right - left, bottom - top

    def x_of(p: float) -> float:
        return round(left + p * span_x, 1)

    def y_of(p: float) -> float:
        return round(bottom - p * span_y, 1)

    most = max((b.labels for b in bins), default=0) or 1
    dots = []
    for b in bins:
        if not b.labels or b.mean_probability is None or b.accuracy.value is None:
            continue
        low = b.accuracy.low if b.accuracy.low is not None else b.accuracy.value
        high = b.accuracy.high if b.accuracy.high is not None else b.accuracy.value
        dots.append(
            Dot(
                x=x_of(b.mean_probability),
                y=y_of(b.accuracy.value),
                low_y=y_of(low),
                high_y=y_of(high),
                r=round(2.5 + 5.5 * math.sqrt(b.labels / most), 1),
                title=(
                    f"{b.low:.1f}-{b.high:.1f}: {b.labels} labels, stated "
                    f"{b.mean_probability * 100:.1f}%, observed {b.accuracy.value * 100:.1f}%"
                ),
            )
        )
    ticks = tuple((i / 5, f"{i * 20}%") for i in range(6))
    return Diagram(SIZE, (left, top, right, bottom), ticks, tuple(dots))
