"""The seam for a batch's dry-run estimate (issue 9), which the batches page compares with.

No estimator exists yet: ``NoEstimates`` answers None, and the page says "no estimate".
A real one is passed to ``create_app(estimates=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Estimate", "EstimateSource", "NoEstimates"]


@dataclass(frozen=True)
class Estimate:
    """What a dry run expects a batch to cost (USD) and how many paid requests it sends."""

    cost_usd: float
    requests: int | None = None
    basis: str = "estimate"


class EstimateSource(Protocol):
    def estimate(self, batch: str) -> Estimate | None: ...


class NoEstimates:
    def estimate(self, batch: str) -> Estimate | None:
        return None
