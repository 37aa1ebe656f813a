"""The envelope of every paid HTTP call: decision providers and the menus' chat runtime alike.

One place owns what every paid call does around its own body and decoding: the clock its
receipt is timed by, the deadline made timezone-aware, the one send under the replay policy
``never`` (``worker.providers.transport``), and the receipt a failed send carries. The caller
builds the request before and reads the response after; neither may send by another path.
"""

from __future__ import annotations

import json
import os
import re
import string
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from shared.errors import DecisionProviderError, NotStrictJSON
from shared.json_measure import MAX_INT_DIGITS
from shared.limits import MAX_ID_CHARS
from shared.replies import Receipt
from shared.scrub import remove_secrets
from shared.strict_json import decode_text
from worker.providers.latency import RecentLatency
from worker.providers.limiter import Limiter
from worker.providers.outbound import (
    FAUX_KEY,
    AuthSpec,
    ErrorDetailsFn,
    OutboundRequest,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
)
from worker.providers.transport import send_never_replay

__all__ = ["MAX_DETAIL_CHARS", "Clock", "Exchange", "PaidHttp", "answer_json"]

#: What a host may say in a failed call's detail (an escalation's, a receipt's): one
#: answer naming 100,000 questions it was not asked made a 9.9 MB detail.
MAX_DETAIL_CHARS = 300

#: Names (models) whose verdict ``PaidHttp.foreign`` keeps, per provider: a host has few.
_MAX_VERDICTS = 64
#: A ``\u`` escape at any depth (one backslash or several), of a character keys are made of:
#: one that means the same written plainly, at any depth, in a JSON string.
_KEY_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=:")


def _unescaped(match: re.Match[str]) -> str:
    char = chr(int(match[1], 16))
    return char if char in _KEY_CHARS else match[0]


def answer_json(body: bytes) -> object:
    """A 200 answer's body as JSON: UTF-8 only, no lone surrogate (``NotStrictJSON``; also
    ``ValueError`` and ``RecursionError`` as ``json.loads`` raises them).

    The standard parser reads more (found by an attack): UTF-16 and UTF-32 bytes, which the
    key scrub reads as UTF-8 and so cannot see the key in, and a ``\\udfff`` escape, a
    string no reply, ledger row or stream entry can be written with (the job was left
    without a terminal message). The surrogate check walks the value only when the text
    holds such an escape (a few per million answers: an emoji written escaped).

    And an integer of over ``MAX_INT_DIGITS`` digits, which no float holds: the answer and
    usage checks (``math.isfinite``) raised ``OverflowError`` on it, which left the provider
    as a bug with a traceback on the user's terminal, the paid call booked ``unknown`` at no
    cost (found by an attack: a 401-digit ``usage.input_tokens``)."""
    text = decode_text(body)
    value = json.loads(text, parse_int=_bounded_int)
    if "\\ud" in text or "\\uD" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJSON(
                "holds a lone surrogate (a \\ud800 to \\udfff escape not in a pair)"
            ) from None
    return value


def _bounded_int(digits: str) -> int:
    if len(digits) > MAX_INT_DIGITS + 1:  # a minus sign
        raise NotStrictJSON(f"holds an integer of over {MAX_INT_DIGITS} digits")
    return int(digits)


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
        #: ``foreign``'s verdicts on names that repeat, by (key, name): bounded.
        self._verdicts: dict[tuple[str, str], bool] = {}

    # --- what the host answered, without the key it was sent -----------------------------
    #
    # A host (or a gateway before it) that writes the key it was sent into a 200 answer
    # would put it in a receipt, and so in a reply, the ledger and the console. Its error
    # bodies are guarded where they are read (``worker.providers.call_errors``); these guard
    # what an answer gives. Only this host's own key: it was sent no other.

    def _sent_key(self) -> str | None:
        """The key this host is sent, read by its variable's name now; None without one, or
        for the faux's placeholder (no secret: and its answers cost no scrubbing)."""
        auth = self.auth
        if auth is None:
            return None
        key = (auth.fixed_key or "").strip()
        if not key and auth.env_var is not None:
            key = os.environ.get(auth.env_var, "").strip()
        return key if key and key != FAUX_KEY else None

    def foreign(self, value: str | None, *, repeats: bool = False) -> str | None:
        """``value`` (an id or a name the host answered with), or None if it holds the key in
        any form ``shared.scrub`` knows (whole, case-folded, base64, a long piece of it), or
        is longer than an id may be (``MAX_ID_CHARS``: a 3 MB model name went in every
        receipt, and a label naming it is refused).

        About 10 us a value; ``repeats`` (a model's name, the same on every answer) keeps
        the verdict for the next answer."""
        if value is not None and len(value) > MAX_ID_CHARS:
            return None
        key = self._sent_key() if value else None
        if key is None or value is None:
            return value
        known = self._verdicts.get((key, value)) if repeats else None
        if known is None:
            known = remove_secrets(value, (key,)) == value
            if repeats and len(self._verdicts) < _MAX_VERDICTS:
                self._verdicts[(key, value)] = known
        return value if known else None

    def foreign_text(self, text: str) -> str:
        """``text`` the host wrote (a reply, an excerpt) with the key's every form removed."""
        key = self._sent_key()
        return text if key is None else remove_secrets(text, (key,))

    def foreign_detail(self, text: str) -> str:
        """A failed answer's detail, which may quote the host (a question id it made up):
        without the key, at most ``MAX_DETAIL_CHARS``. Scrubbed before it is cut, and only
        a bounded head of it, so that a key cut in two at the end is never left."""
        head = self.foreign_text(text[: 4 * MAX_DETAIL_CHARS])
        return head if len(head) <= MAX_DETAIL_CHARS else head[: MAX_DETAIL_CHARS - 1] + "…"

    def foreign_body(self, body: bytes) -> bytes:
        """A whole answer's body without the key (a chat reply: kept, replayed, escalated);
        as it came when it holds none, or is not UTF-8 (then it is no JSON to read either).

        The key may come ``\\u``-escaped, once in the body or more deeply in JSON text
        inside it (a tool call's arguments, a pick in the reply's text: each read as JSON
        later): every escape of a character a key is made of is read first, at any depth
        (found by an attack: with every character escaped, no piece of the key stood
        whole). The body changes only where a key was taken out."""
        key = self._sent_key()
        if key is None:
            return body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return body
        plain = _KEY_ESCAPE.sub(_unescaped, text)
        cleaned = remove_secrets(plain, (key,))
        return body if cleaned == plain else cleaned.encode("utf-8")

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
