"""A batch's dry-run estimate, which the batches page compares with: the very estimate
``decisions ledger status --batch`` shows (stored under ``keys.batch_estimate`` at submit or
by a dry run, read through ``shared.client.Client.stored_estimate``'s format).

``StoredEstimates`` is the console's default; ``NoEstimates`` remains for tests and for a
console that has no Redis of estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import redis

from shared import keys
from shared.estimate import Estimate as StoredEstimate

__all__ = ["Estimate", "EstimateSource", "NoEstimates", "StoredEstimates"]


@dataclass(frozen=True)
class Estimate:
    """What a dry run expects a batch to cost (USD) and how many paid requests it sends."""

    cost_usd: float
    requests: int | None = None
    basis: str = "estimate"
    #: Some requests go to a provider with no price: ``cost_usd`` is a lower bound.
    cost_unknown: bool = False


class EstimateSource(Protocol):
    def estimate(self, batch: str) -> Estimate | None: ...


class NoEstimates:
    def estimate(self, batch: str) -> Estimate | None:
        return None


class StoredEstimates:
    """The estimate stored in Redis for a batch (None if none is, or Redis is out of reach)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def estimate(self, batch: str) -> Estimate | None:
        try:
            raw = self.redis.get(keys.batch_estimate(batch))
        except redis.RedisError:
            return None
        if raw is None:
            return None
        stored = StoredEstimate.from_json(raw)
        return Estimate(
            cost_usd=stored.cost_known_usd,
            requests=stored.requests,
            cost_unknown=stored.cost_unknown,
        )
