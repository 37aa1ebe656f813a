"""What one worker process sent: requests handed to a provider, and their booked cost."""

from __future__ import annotations

from dataclasses import dataclass

from shared.replies import Receipt

__all__ = ["DeliveryStats"]


@dataclass
class DeliveryStats:
    """Requests this process sent (a local handler or tool run is no request) and their cost."""

    requests_sent: int = 0
    cost_usd: float = 0.0

    def add(self, receipt: Receipt) -> None:
        self.requests_sent += 1
        self.cost_usd += receipt.cost_usd or 0.0
