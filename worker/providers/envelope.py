"""The envelope of every paid HTTP call: decision providers and the menus' chat runtime alike.

One place owns what every paid call does around its own body and decoding: the clock its
receipt is timed by, the deadline made timezone-aware, the one send under the replay policy
``never`` (``worker.providers.transport``), and the receipt a failed send carries. The caller
builds the request before and reads the response after; neither may send by another path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from shared.errors import DecisionProviderError
from shared.replies import Receipt
from worker.providers.latency import RecentLatency
from worker.providers.limiter import Limiter
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetailsFn,
    OutboundRequest,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
)
from worker.providers.transport import send_never_replay

__all__ = ["Clock", "Exchange", "PaidHttp"]


@dataclass(frozen=True)
class Clock:
    """When a call started, by the wall (for its receipt) and monotonic (for its duration)."""

    started_at: datetime
    t0: float

    @classmethod
    def start(cls) -> Clock:
        return cls(datetime.now(UTC), time.monotonic())

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0


@dataclass(frozen=True)
class Exchange:
    """A paid call that got an answer over HTTP (any 2xx), with its clock."""

    response: TransportResponse
    clock: Clock


#: The receipt of a call that failed: the error, and the clock of the call.
FailedReceipt = Callable[[DecisionProviderError, Clock], Receipt]


class PaidHttp:
    """Sends one paid POST under the replay policy ``never``; a failure carries its receipt."""

    def __init__(
        self,
        provider: str,
        http: httpx.AsyncClient,
        *,
        auth: AuthSpec | None,
        policy: TransportPolicy,
        limiter: Limiter | None,
    ) -> None:
        self.provider = provider
        self.http = http
        self.auth = auth
        self.policy = policy
        self.limiter = limiter
        #: This provider's recent answer times: the floor of time left to send with.
        self.latency = RecentLatency(policy.send_floor_quantile)

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: datetime,
        *,
        clock: Clock,
        failed: FailedReceipt,
        unknown_cost: UnknownCost | None = None,
        error_details: ErrorDetailsFn | None = None,
        before: Callable[[datetime], Awaitable[None]] | None = None,
    ) -> Exchange:
        """Send once; ``before`` (a provider's own check, given the deadline made
        timezone-aware here, the one place) runs first, and its failure carries a receipt too."""
        if deadline.tzinfo is None:  # read as UTC, as the transport reads it
            deadline = deadline.replace(tzinfo=UTC)
        try:
            if before is not None:
                await before(deadline)
            response = await send_never_replay(
                self.http,
                OutboundRequest("POST", url, body, headers),
                provider=self.provider,
                deadline=deadline,
                auth=self.auth,
                policy=self.policy,
                unknown_cost=unknown_cost or UnknownCost(),
                error_details=error_details,
                limiter=self.limiter,
                latency=self.latency,
            )
        except DecisionProviderError as exc:
            exc.receipt = failed(exc, clock)
            raise
        return Exchange(response, clock)
