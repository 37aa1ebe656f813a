"""What an answered status means: the one table from an HTTP status to an error code.

The transport (``worker.providers.transport``) sends, waits and reads; when the provider
answers with anything but a 2xx or a 429 (which the send loop handles itself: a 429 that
says when to come back is the one answer sent again), it looks the status up here. Each
answer says which error it is, whether the provider may have processed the request (its
cost may be owed: ``outcome_unknown``), and whether the error body is worth looking into
(``error_details``). Apart from the loop, as ``worker.providers.failures`` is for the
exceptions of a send that got no answer: this is where a 5xx is declared "possibly
processed", so the request is never sent again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from shared.errors import ProviderErrorCode

__all__ = ["REDIRECT_NOT_PROCESSED", "Answered", "answered"]

#: Redirect statuses: a decision API answering one did not process the POST (wrong base URL).
REDIRECT_NOT_PROCESSED: Final = frozenset({301, 302, 307, 308})


@dataclass(frozen=True)
class Answered:
    """What a status that is an error means."""

    code: ProviderErrorCode
    message: str
    #: The request may have been processed, so its cost may be owed.
    with_cost: bool = False
    #: The error body may say more (a request id, a kind): ``error_details`` looks into it.
    details: bool = False
    #: A replay's "no recording" header (``worker.providers.observers.replay_miss``) names
    #: the error instead. Never on a status saying the provider may have processed the
    #: request: that stays ``outcome_unknown`` whatever a header claims.
    replay_miss: bool = True


def answered(status: int) -> Answered:
    """The error a status other than 2xx and 429 stands for."""
    if status == 408 or status >= 500:
        return Answered(
            "outcome_unknown",
            f"status {status}: the provider may have processed the request",
            with_cost=True,
            replay_miss=False,
        )
    if status in (401, 403):
        return Answered("auth", f"status {status}: the key was refused", details=True)
    if status in REDIRECT_NOT_PROCESSED:
        return Answered(
            "configuration",
            f"status {status}: redirected, the request was not processed; check the base URL",
        )
    if 400 <= status < 500:
        return Answered(
            "invalid_request", f"status {status}: the provider refused the request", details=True
        )
    # 1xx that httpx surfaced or a 3xx that may mean "processed, look elsewhere" (303).
    return Answered("outcome_unknown", f"unexpected status {status}", with_cost=True)
