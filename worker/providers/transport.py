"""The replay policy ``never``: send one paid request over HTTP, re-sending it only when it
provably never reached the provider, or when a 429 says when to come back.

Shared by every decision provider and by the menus' chat-completions runtime, so it knows
nothing of decision shapes: it takes URL, body bytes and headers, and returns the status,
headers and body, or raises ``DecisionProviderError`` with a ``code`` naming the phase in
which the request failed (a summary; exceptions are mapped in one table,
``worker.providers.failures.FAILURES``):

==============================================  ===================  =======================
what happened                                    code                 was anything sent?
==============================================  ===================  =======================
key variable unset or empty                      ``configuration``    no
``ConnectError`` (DNS, refused, TLS),            retried with          no
``ConnectTimeout``, ``PoolTimeout``              backoff, then
                                                 ``connection``
429 with ``Retry-After`` that fits               retried after it      no (the 429 was not
                                                                       processed)
429 without one, or one that does not fit,       ``rate_limited``      no
or with the attempts spent
``WriteError``/``WriteTimeout``/``ReadError``/   ``outcome_unknown``  maybe: never re-sent
``ReadTimeout``/``RemoteProtocolError``, 408,
every 5xx (529 too), the deadline or a cancel
ending a request in flight
deadline reached with nothing in flight          ``timeout``          no
(before an attempt, during a wait, or while
still connecting), or less time left than the
provider's answers took lately
(``worker.providers.latency``)
401, 403                                         ``auth``             refused by the server
other 4xx (400, 413, 422, ...)                   ``invalid_request``  refused by the server
301/302/307/308                                  ``configuration``    not processed (wrong
                                                                       base URL)
the host's cancel with nothing in flight         ``aborted``          no
a body over ``DECISIONS_MAX_RESPONSE_BYTES``     ``invalid_response`` yes: processed, never
(decompressed; ``worker.http.body``)                                  re-sent
==============================================  ===================  =======================

Cancellation. An ``asyncio.CancelledError`` from outside is *converted*: to ``aborted`` when
nothing was in flight (waiting for the limiter, between attempts, still connecting), and to
``outcome_unknown`` when the request may have left. The runner must learn which, to record
the ledger row (``not_sent`` vs ``unknown``) before the task unwinds, and a bare
``CancelledError`` cannot say. The converted error is raised ``from`` the ``CancelledError``
(``was_cancelled(exc)`` tells) and the task's cancellation request is left pending (we never
call ``Task.uncancel()``): a runner records the outcome, then re-raises ``CancelledError``
itself when ``was_cancelled`` is true so that shutdowns and enclosing ``TaskGroup``s still
unwind.

Secrecy: the key is read by its variable's name at send time, put in one header, and never
appears in a message, a log line or an error attribute; errors keep only exception class
names, status codes and the phase. Response bodies of errors are dropped (an ``error_details``
callback may pick a ``ref_id`` and a short error kind out of them, both sanitised).

Recording: every response that arrives is handed to ``observers.observe`` before it is
classified (``DECISIONS_RECORD_DIR``), with the key, so that no recording can hold it. A 4xx
with ``x-decisions-replay-miss`` (a replay with no recording of the request) is
``invalid_request`` whose message is that header's sanitised text.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import UTC, datetime

import httpx

from shared.errors import DecisionProviderError, ProviderErrorCode
from worker.http.body import read_body, read_prefix
from worker.http.connection_pool import drop_read_stream
from worker.providers.call_errors import provider_error
from worker.providers.failures import AGAIN, Phase, failure_of
from worker.providers.latency import RecentLatency
from worker.providers.limiter import Limiter, NoLimiter
from worker.providers.observers import observe, replay_miss
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetails,
    ErrorDetailsFn,
    OutboundRequest,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
    parse_retry_after,
    read_key,
)
from worker.providers.statuses import answered

__all__ = ["send_never_replay", "was_cancelled"]

logger = logging.getLogger(__name__)

#: What is read of an error response's body (``error_details`` looks into it).
ERROR_BODY_BYTES = 64 * 1024
#: How much longer than httpx's per-phase timeout the whole attempt may take.
_OUTER_GRACE_S = 0.05


def was_cancelled(exc: BaseException) -> bool:
    """True when ``exc`` was converted from the host's ``asyncio.CancelledError``."""
    return isinstance(exc.__cause__, asyncio.CancelledError)


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    # A provider sends every request to one of a few URLs: parse each once (half of what
    # building a request costs otherwise).
    return httpx.URL(url)


class _Call:
    """One request under the policy: the attempt loop and the errors it raises."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        request: OutboundRequest,
        *,
        provider: str,
        deadline: datetime,
        auth: AuthSpec | None,
        policy: TransportPolicy,
        unknown_cost: UnknownCost,
        error_details: ErrorDetailsFn | None,
        limiter: Limiter,
        latency: RecentLatency | None = None,
    ) -> None:
        self.client = client
        self.request = request
        self.provider = provider
        self.auth = auth
        self.policy = policy
        self.unknown_cost = unknown_cost
        self.error_details = error_details
        self.limiter = limiter
        self.latency = latency
        self.attempts = 0
        self.key: str | None = None
        self.started = time.monotonic()
        left = (deadline - datetime.now(UTC)).total_seconds()
        self.deadline_mono = self.started + left

    # --- errors ---------------------------------------------------------------------------

    def error(
        self,
        code: ProviderErrorCode,
        message: str,
        *,
        status_code: int | None = None,
        details: ErrorDetails | None = None,
        retry_after_s: float | None = None,
        with_cost: bool = False,
    ) -> DecisionProviderError:
        exc = provider_error(
            code,
            message,
            provider=self.provider,
            attempts=self.attempts,
            key=self.key,
            unknown_cost=self.unknown_cost,
            status_code=status_code,
            details=details,
            retry_after_s=retry_after_s,
            with_cost=with_cost,
        )
        log = logger.warning if code == "outcome_unknown" else logger.info
        log(
            "provider %s: %s after %d attempt(s): %s",
            self.provider, code, self.attempts, exc.detail,
        )
        return exc

    def remaining(self) -> float:
        return self.deadline_mono - time.monotonic()

    # --- the loop -------------------------------------------------------------------------

    async def run(self) -> TransportResponse:
        if self.auth is not None:
            self.key = read_key(self.auth, self.provider)
        while True:
            if self.remaining() <= 0:
                raise self.error(
                    "timeout", "the deadline passed before the request could be sent"
                )
            response = await self._attempt()
            if response is not None:
                return response

    async def _attempt(self) -> TransportResponse | None:
        """One send. ``None`` means "send again" (after any wait, done here)."""
        token = await self._acquire()
        budget = min(self.policy.timeout_s, self.remaining())
        if budget <= 0:
            await self.limiter.release(token)
            raise self.error(
                "timeout", "the deadline passed waiting for a send slot; nothing was sent"
            )
        floor = self.latency.floor_s() if self.latency is not None else 0.0
        if self.remaining() < floor:
            # Mostly cut off in flight, unknown and maybe paid (``worker.providers.latency``).
            await self.limiter.release(token)
            raise self.error(
                "timeout",
                f"{max(self.remaining(), 0.0):.2f} s left before the deadline, under the "
                f"{floor:.2f} s this provider's answers took lately "
                "(DECISIONS_SEND_FLOOR_QUANTILE); nothing was sent",
            )
        self.attempts += 1
        phase = Phase()
        sent_at = time.monotonic()
        cut_by_deadline = budget < self.policy.timeout_s
        try:
            try:
                # httpx enforces ``budget`` per phase and says which phase ran out; this outer
                # bound (a hair longer, so httpx's own answer wins a tie) caps the attempt's
                # total when several phases each take part of it.
                async with asyncio.timeout(budget + _OUTER_GRACE_S):
                    response = await self.client.send(self._build(budget, phase), stream=True)
                    # Read here, under the cap (``worker.http.body``): a body's failure is
                    # classified as the send's, after the request left.
                    if 200 <= response.status_code < 300:
                        body = await read_body(response, self.policy.max_response_bytes)
                        if self.latency is not None:
                            self.latency.note(time.monotonic() - sent_at)
                    else:
                        # An error's body is only looked into (its kind, a request id): its
                        # start is enough, and a 429 or 500 with a page of megabytes stays
                        # what its status says, not an answer too big to read.
                        body = await read_prefix(response, ERROR_BODY_BYTES)
                drop_read_stream(response)  # httpx's reference cycle (its docstring)
            finally:
                await self.limiter.release(token)
        except (asyncio.CancelledError, Exception) as exc:
            failure = failure_of(
                exc, unsent=phase.provably_unsent, cut_by_deadline=cut_by_deadline
            )
            if failure.code == AGAIN:
                await self._never_sent(failure.message)
                return None
            error = self.error(failure.code, failure.message, with_cost=failure.with_cost)
            # A cancel stays visible (``was_cancelled``); anything else is dropped, as its
            # text may hold what the request carried.
            raise error from (exc if isinstance(exc, asyncio.CancelledError) else None)
        # Every response that arrived, before classifying it: a recording keeps failures too.
        observe(
            self.provider, self.request.method, self.request.url, self.request.body,
            self.request.headers, response, body,
            key=self.key, auth_header=self.auth.header if self.auth else None,
        )
        return await self._classify(response, body)

    def _build(self, budget: float, phase: Phase) -> httpx.Request:
        headers = dict(self.request.headers)
        if self.auth is not None and self.key is not None:
            scheme = self.auth.scheme
            headers[self.auth.header] = f"{scheme} {self.key}" if scheme else self.key
        return self.client.build_request(
            self.request.method,
            _parsed_url(self.request.url),
            content=self.request.body,
            headers=headers,
            timeout=httpx.Timeout(max(budget, 0.001)),
            extensions={"trace": phase},
        )

    async def _acquire(self) -> object:
        try:
            async with asyncio.timeout(max(self.remaining(), 0.0)):
                return await self.limiter.acquire(self.provider)
        except asyncio.CancelledError as cancel:
            raise self.error("aborted", "cancelled before sending; nothing was sent") from cancel
        except TimeoutError:
            raise self.error(
                "timeout", "the deadline passed waiting for a send slot; nothing was sent"
            ) from None

    async def _wait(self, seconds: float) -> None:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError as cancel:
            raise self.error(
                "aborted", "cancelled between attempts; nothing is in flight"
            ) from cancel

    async def _never_sent(self, what: str) -> None:
        if self.attempts >= self.policy.max_attempts:
            raise self.error(
                "connection", f"the provider could not be reached ({what}); nothing was sent"
            )
        wait = self.policy.backoff_s(self.attempts)
        if wait >= self.remaining():
            raise self.error(
                "timeout",
                f"the provider could not be reached ({what}) and the deadline leaves no time "
                "to try again; nothing was sent",
            )
        logger.info(
            "provider %s: attempt %d never sent (%s); again in %.2fs",
            self.provider, self.attempts, what, wait,
        )
        await self._wait(wait)

    async def _classify(self, response: httpx.Response, body: bytes) -> TransportResponse | None:
        status = response.status_code
        if 200 <= status < 300:
            return TransportResponse(
                status, response.headers, body, self.attempts, time.monotonic() - self.started
            )
        if status == 429:
            await self._rate_limited(response, body)
            return None
        verdict = answered(status)
        miss = replay_miss(response.headers, self.key) if verdict.replay_miss else None
        if miss is not None:
            raise self.error("invalid_request", miss, status_code=status)
        raise self.error(
            verdict.code,
            verdict.message,
            status_code=status,
            details=self._details(response, body) if verdict.details else None,
            with_cost=verdict.with_cost,
        )

    def _details(self, response: httpx.Response, body: bytes) -> ErrorDetails | None:
        if self.error_details is None:
            return None
        try:
            return self.error_details(response.status_code, response.headers, body)
        except Exception:
            return None

    async def _rate_limited(self, response: httpx.Response, body: bytes) -> None:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is not None:
            await self.limiter.note_retry_after(self.provider, retry_after)
        if retry_after is None:
            raise self.error(
                "rate_limited", "status 429 without Retry-After", status_code=429,
                details=self._details(response, body),
            )
        if self.attempts >= self.policy.max_attempts:
            raise self.error(
                "rate_limited", "status 429 and the attempts are spent", status_code=429,
                retry_after_s=retry_after, details=self._details(response, body),
            )
        if retry_after >= self.remaining():
            raise self.error(
                "rate_limited", "status 429; Retry-After ends past the deadline",
                status_code=429, retry_after_s=retry_after, details=self._details(response, body),
            )
        logger.info(
            "provider %s: attempt %d got 429; again in %.2fs (Retry-After)",
            self.provider, self.attempts, retry_after,
        )
        await self._wait(retry_after)


async def send_never_replay(
    client: httpx.AsyncClient,
    request: OutboundRequest,
    *,
    provider: str,
    deadline: datetime,
    auth: AuthSpec | None,
    policy: TransportPolicy | None = None,
    unknown_cost: UnknownCost | None = None,
    error_details: ErrorDetailsFn | None = None,
    limiter: Limiter | None = None,
    latency: RecentLatency | None = None,
) -> TransportResponse:
    """Send ``request`` under the replay policy ``never``; see the module docstring.

    Returns any 2xx. Every failure is a ``DecisionProviderError`` whose ``attempts`` counts the
    sends made; an ``outcome_unknown`` one carries ``unknown_cost``. ``latency`` (the
    provider's recent answer times) notes each answer, and no attempt is made with less time
    left than the floor it gives (``timeout``, nothing sent).
    """
    call = _Call(
        client,
        request,
        provider=provider,
        deadline=deadline,
        auth=auth,
        policy=policy or TransportPolicy(),
        unknown_cost=unknown_cost or UnknownCost(),
        error_details=error_details,
        limiter=limiter or NoLimiter(),
        latency=latency,
    )
    return await call.run()
