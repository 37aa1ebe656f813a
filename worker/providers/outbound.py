"""What a paid HTTP request is made of, on its way out and back: the key's source and
header (``AuthSpec``, ``read_key``), the retry policy, the request, the response, what a
lost call is booked at, and ``Retry-After``.

Plain values apart from the send loop (``worker.providers.transport``), so providers and the
chat runtime build requests without importing the loop.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

import httpx

from shared.errors import DecisionProviderError
from shared.replies import CostBasis
from shared.settings import Settings

__all__ = [
    "FAUX_KEY",
    "AuthSpec",
    "ErrorDetails",
    "ErrorDetailsFn",
    "OutboundRequest",
    "TransportPolicy",
    "TransportResponse",
    "UnknownCost",
    "key_problem",
    "parse_retry_after",
    "read_key",
]


#: The faux wants an auth header but checks no key: this placeholder is all it gets.
FAUX_KEY: Final = "faux-no-secret"


@dataclass(frozen=True)
class AuthSpec:
    """Where the key comes from (a variable, by name) and how it goes on the wire."""

    #: The key's variable; ``None`` for a host that takes a fixed, non-secret key (the faux).
    env_var: str | None
    header: str = "Authorization"
    #: ``"Bearer"`` sends ``Bearer KEY``; ``None`` sends the key as the header's whole value.
    scheme: str | None = "Bearer"
    #: A key given directly (the seed's ``apiKey``), which wins over the variable; or the
    #: placeholder the faux insists on. Kept out of ``repr`` so a logged provider shows none.
    fixed_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class TransportPolicy:
    #: Longest single attempt (the provider's own timeout); cut further by the deadline.
    timeout_s: float = 30.0
    #: Sends of one request, counting 429 retries and never-sent retries alike.
    max_attempts: int = 3
    backoff_base_s: float = 0.2
    backoff_max_s: float = 2.0
    #: Longest response body read, decompressed (``DECISIONS_MAX_RESPONSE_BYTES``).
    max_response_bytes: int = 16 * 2**20
    #: A request is not sent with less time left than this quantile of the provider's
    #: recent answer times (``worker.providers.latency``); 0: while any time is left. 0 for
    #: a policy made without settings; ``DECISIONS_SEND_FLOOR_QUANTILE``'s default is 0.5.
    send_floor_quantile: float = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> TransportPolicy:
        """The policy the settings give every provider and runtime."""
        return cls(
            timeout_s=settings.provider_timeout_s,
            max_attempts=settings.max_transport_attempts,
            max_response_bytes=settings.max_response_bytes,
            send_floor_quantile=settings.send_floor_quantile,
        )

    def backoff_s(self, attempt: int) -> float:
        """Wait after the ``attempt``-th never-sent failure: exponential, half jittered."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # jitter, not crypto


@dataclass(frozen=True)
class OutboundRequest:
    method: str
    url: str
    body: bytes | None = None
    #: Headers other than auth; auth is added per attempt from ``AuthSpec``.
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UnknownCost:
    """What a request whose outcome is unknown is booked at (``None``: unknown, never 0)."""

    usd: float | None = None
    basis: CostBasis | None = None


@dataclass(frozen=True)
class ErrorDetails:
    """What may be kept of an error body: the provider's reference and a short error kind."""

    ref_id: str | None = None
    kind: str | None = None


@dataclass(frozen=True)
class TransportResponse:
    status_code: int
    headers: httpx.Headers
    body: bytes
    attempts: int
    elapsed_s: float


ErrorDetailsFn = Callable[[int, httpx.Headers, bytes], ErrorDetails]


def read_key(auth: AuthSpec, provider: str) -> str:
    """The key, read by its variable's name now, without surrounding whitespace (a secret
    file's final line break); ``configuration`` naming the variable if it is unset or holds
    what no header can carry (``key_problem``)."""
    fixed = (auth.fixed_key or "").strip()
    if fixed:
        key, where = fixed, f"the key given to {provider}"
    elif auth.env_var is None:
        raise DecisionProviderError(
            "configuration", "no key variable is configured; nothing was sent", provider=provider
        )
    else:
        key, where = os.environ.get(auth.env_var, "").strip(), auth.env_var
        if not key:
            raise DecisionProviderError(
                "configuration",
                f"{auth.env_var} is not set; nothing was sent",
                provider=provider,
            )
    problem = key_problem(key)
    if problem is not None:
        # Refused here, as an unset key is: httpx would refuse it only while building or
        # writing the request, which books the call as possibly sent.
        raise DecisionProviderError(
            "configuration",
            f"{where} holds {problem}; a key is visible ASCII only; nothing was sent",
            provider=provider,
        )
    return key


def key_problem(key: str) -> str | None:
    """What in ``key`` (already stripped) a header cannot carry, named by kind only (never
    the character's place, nor the key); ``None`` if every character is visible ASCII.

    HTTP allows a space or a tab inside a header value, but never inside a key: one there is
    a pasted ``Bearer ...`` or two values run together.
    """
    if key.isascii() and key.isprintable() and " " not in key:
        return None  # the common case, at C speed: read_key runs on every request
    for char in key:
        if "!" <= char <= "~":
            continue
        if char in "\r\n":
            return "a line break"
        if char in " \t":
            return "a space or a tab"
        if char < " " or char == "\x7f":
            return "a control character"
        return "a non-ASCII character"
    return None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds from now (delta-seconds or an HTTP date); ``None`` if bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


