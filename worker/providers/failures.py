"""What a failed send means: the one table from an exception to an error code.

The transport (``worker.providers.transport``) follows each attempt's connection events
(``Phase``) and, when the send raises, looks the exception up here with two facts: whether
the request *provably* never left (a connection was being made and no byte of the request
was written), and whether the call's deadline, not the provider timeout, cut the attempt.
Each row says what that means: send again (nothing left), or an error code, and whether the
call's cost may have been incurred. This is where a read timeout is declared "possibly
sent" (``outcome_unknown``), so the request is never sent again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final, Literal

import httpx

from shared.errors import ProviderErrorCode
from worker.http.body import ResponseTooLarge

__all__ = ["AGAIN", "FAILURES", "NEVER_SENT", "Failure", "Phase", "Rule", "failure_of"]

#: Exceptions raised before a single byte of the request left: safe to send again.
NEVER_SENT: Final[tuple[type[Exception], ...]] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
#: The "code" of a row whose request never left and may be sent again (after a backoff).
AGAIN: Final = "again"


class Phase:
    """Follows httpcore's trace events to tell "still connecting" from "request may be out".

    Only a connection event *seen* proves nothing was written: a transport that emits no
    events (a MockTransport, a reused pooled connection before its first event) counts as
    possibly sent, the safe side.
    """

    def __init__(self) -> None:
        self.connecting = False
        self.sending = False

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(("connect_tcp.started", "connect_unix_socket.started")):
            self.connecting = True
        elif event.endswith("send_request_headers.started"):
            self.sending = True

    @property
    def provably_unsent(self) -> bool:
        return self.connecting and not self.sending


@dataclass(frozen=True)
class Rule:
    """A row: an exception of ``raised``, when ``unsent`` and ``cut`` match (``None``:
    either), means ``code``. ``message`` may name ``{name}`` (the exception's class) and
    ``{reason}`` (what ended the request: the deadline or the provider timeout)."""

    raised: tuple[type[BaseException], ...]
    unsent: bool | None
    cut: bool | None
    code: ProviderErrorCode | Literal["again"]
    message: str
    with_cost: bool = False


@dataclass(frozen=True)
class Failure:
    code: ProviderErrorCode | Literal["again"]
    message: str
    #: The request may have been processed, so its cost may be owed.
    with_cost: bool


_Y, _N, _ANY = True, False, None
_TIMEOUTS = (httpx.ConnectTimeout, httpx.PoolTimeout)

#: First matching row wins. ``TimeoutError`` is the attempt's own outer bound (asyncio).
FAILURES: Final[tuple[Rule, ...]] = (
    # The host cancelled the call (a shutdown, a job's deadline in the runner).
    Rule((asyncio.CancelledError,), _Y, _ANY, "aborted",
         "cancelled while connecting; nothing was sent"),
    Rule((asyncio.CancelledError,), _ANY, _ANY, "outcome_unknown",
         "cancelled while the request was in flight", with_cost=True),
    # The attempt's outer bound.
    Rule((TimeoutError,), _Y, _N, AGAIN, "ConnectTimeout"),
    Rule((TimeoutError,), _Y, _Y, "timeout",
         "the deadline passed while connecting; nothing was sent"),
    Rule((TimeoutError,), _ANY, _ANY, "outcome_unknown",
         "{reason} ended the request in flight", with_cost=True),
    # Nothing left: again, unless the deadline is what ran out.
    Rule(_TIMEOUTS, _ANY, _Y, "timeout",
         "the deadline passed before the request left ({name}); nothing was sent"),
    Rule(NEVER_SENT, _ANY, _ANY, AGAIN, "{name}"),
    # The request may be out: never again.
    Rule((httpx.ReadTimeout, httpx.WriteTimeout), _ANY, _ANY, "outcome_unknown",
         "{reason} ended the request in flight ({name})", with_cost=True),
    Rule((httpx.UnsupportedProtocol, httpx.InvalidURL), _ANY, _ANY, "configuration",
         "bad provider URL ({name}); nothing was sent"),
    # The provider answered with more than the worker reads: processed, so never again.
    Rule((ResponseTooLarge,), _ANY, _ANY, "invalid_response",
         "the response was not read: its body is over DECISIONS_MAX_RESPONSE_BYTES",
         with_cost=True),
    Rule((httpx.DecodingError,), _ANY, _ANY, "invalid_response",
         "the response could not be decoded ({name})", with_cost=True),
    # WriteError, ReadError, RemoteProtocolError, and anything unforeseen: the request may
    # have been received, so never again.
    Rule((Exception,), _ANY, _ANY, "outcome_unknown",
         "the connection failed after the request may have left ({name})", with_cost=True),
)


def failure_of(exc: BaseException, *, unsent: bool, cut_by_deadline: bool) -> Failure:
    """The first row of ``FAILURES`` that ``exc`` and the two facts match."""
    reason = "the deadline" if cut_by_deadline else "the provider timeout"
    for rule in FAILURES:
        if (
            isinstance(exc, rule.raised)
            and rule.unsent in (None, unsent)
            and rule.cut in (None, cut_by_deadline)
        ):
            text = rule.message.format(name=type(exc).__name__, reason=reason)
            return Failure(rule.code, text, rule.with_cost)
    raise exc  # a BaseException that is not ours to classify (KeyboardInterrupt, SystemExit)
