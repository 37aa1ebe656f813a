"""``FauxProvider``: the other side of the wire, independent of any transport.

``plan`` turns one HTTP request into an outcome and the delay before it; ``handle`` and
``handle_async`` wait out the delay (blocking or with asyncio) and return the outcome. The
server and the in-process transport both play outcomes; neither decides anything.

Decision endpoints, in the order a request meets them: its *admission* once its head is
in (which behaviour applies, and whether ``fail_first`` leaves its mode in force), where
``drop_before_read`` ends it (not counted: the body was never read); then counting by body
digest and call key, latency, the connection-level modes, size, auth, the error modes,
validation (with images), and the answer (``ok``, ``refuse``, ``bad_probabilities``).
With ``replay`` (a directory of recordings, ``worker.testing.faux.replay``), a request in mode
``ok`` gets its recorded response instead of a made-up one, or a loud miss; the failure
modes still apply first, so a test can inject a 503 while replaying.
Control endpoints (``/_faux/...``) and catalogs never misbehave, so a test can always
reach them, whatever the behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from shared.canonical import digest_of, sha256_hex

from . import wire
from .behaviour import FauxBehaviour
from .chat import CHAT_PATHS, FauxChat
from .control import FauxControl
from .counters import Counters
from .envelopes import error_body
from .images import check_images
from .outcome import FauxDrop, FauxResponse, Outcome, json_response
from .ratelimit import RateLimit
from .reading import (
    NO_JSON,
    SYSTEM_ONE_FLAVOURS,
    Admission,
    authorised,
    call_key_of,
    decisions_flavour,
    is_decision,
    parse_body,
    question_ids,
    retry_after,
)
from .replay import ReplayMiss, ReplayStore
from .responses import (
    openai_response,
    openrouter_response,
    parallel_response,
    system_one_response,
)
from .validate import RequestProblem, check_openai, check_parallel, check_system_one

if TYPE_CHECKING:
    import httpx

__all__ = ["FauxProvider"]

#: ``garbage``: a 200 that claims JSON and is not (a truncated body, as a cut proxy gives).
GARBAGE_BODY: Final = b'{"answers": {"q": <faux garbage'
#: ``deep_json``: a 200 of valid JSON nested deeper than Python's parser can go (200 KB).
DEEP_JSON_BODY: Final = b'{"answers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

_INTERNAL_ERROR_HEADER: Final = "x-faux-internal-error"

logger = logging.getLogger(__name__)


class FauxProvider(FauxControl):
    """A fake decision API: stable made-up answers, counts, and injected failures."""

    def __init__(
        self,
        behaviour: FauxBehaviour | None = None,
        *,
        replay: ReplayStore | Path | str | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self._behaviour = behaviour or FauxBehaviour()
        #: Requests a second past which the faux answers 429 (``worker.testing.faux.ratelimit``).
        self.rate_limit = rate_limit or RateLimit()
        if replay is not None and not isinstance(replay, ReplayStore):
            replay = ReplayStore(replay)
        self._replay: ReplayStore | None = replay
        self._counters = Counters()
        #: The chat-completions endpoint's scripted replies (``worker.testing.faux.chat``).
        self.chat = FauxChat()
        self._route_table = self._routes()

    # --- behaviour -------------------------------------------------------------------------
    @property
    def behaviour(self) -> FauxBehaviour:
        return self._behaviour

    def set_behaviour(self, behaviour: FauxBehaviour) -> None:
        """Replace the behaviour; ``fail_first`` budgets start again."""
        self._behaviour = behaviour
        self._counters.restart_failures()

    def update_behaviour(self, **changes: Any) -> FauxBehaviour:
        """Change some fields (validated); the rest stay. Returns the new behaviour."""
        new = FauxBehaviour.model_validate({**self._behaviour.model_dump(), **changes})
        self.set_behaviour(new)
        return new

    def override(self, call_key: str, behaviour: FauxBehaviour | None) -> None:
        """Give one call key its own behaviour (``None`` removes it)."""
        overrides = dict(self._behaviour.overrides)
        if behaviour is None:
            overrides.pop(call_key, None)
        else:
            overrides[call_key] = behaviour
        self.update_behaviour(overrides=overrides)

    # --- replay ----------------------------------------------------------------------------
    @property
    def replay(self) -> ReplayStore | None:
        return self._replay

    def replay_misses(self) -> list[ReplayMiss]:
        """Requests the replay had no recording for (empty without a replay)."""
        return self._replay.misses() if self._replay is not None else []

    # --- counts ----------------------------------------------------------------------------
    def requests(self) -> dict[str, int]:
        """Decision requests read so far, by SHA-256 of the body's canonical JSON."""
        return self._counters.by_digest()

    def calls(self) -> dict[str, int]:
        """Decision requests read so far, by ``X-Decisions-Call`` header."""
        return self._counters.by_call()

    def count(self, digest: str) -> int:
        return self._counters.count(digest)

    def total(self) -> int:
        return self._counters.total()

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        """Around a request held for its latency (by the server or the in-process transport)."""
        return self._counters.waiting()

    def peak_in_flight(self) -> int:
        """The most requests held for their latency at once since the start (or ``reset``)."""
        return self._counters.peak_waiting()

    def reset(self) -> None:
        """Forget every count and restart ``fail_first``; the behaviour stays."""
        self._counters.reset()

    # --- handling --------------------------------------------------------------------------
    def admit(
        self, method: str, path: str, headers: Mapping[str, str]
    ) -> Admission | None:
        """The admission of a request whose head just arrived; None if not a decision request.

        Uses one unit of ``fail_first`` when the mode applies, so call it once a request:
        the server does, and passes it to ``plan``.
        """
        if not is_decision(method, path):
            return None
        return self._admit({k.lower(): v for k, v in headers.items()})

    def _admit(self, headers: Mapping[str, str]) -> Admission:
        call_key = call_key_of(headers)
        root = self._behaviour
        behaviour = root.for_call(call_key)
        mode = behaviour.mode
        if mode != "ok":
            scope = "" if behaviour is root else f"call:{call_key}"
            if not self._counters.take_failure(scope, behaviour.fail_first):
                mode = "ok"
        return Admission(behaviour, mode, call_key)

    def plan(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None = None,
    ) -> tuple[float, Outcome]:
        """The outcome of one request and the seconds to wait before it (nothing waits here).

        ``admission`` is what ``admit`` gave for this request, if it was called; otherwise
        the request is admitted here.
        """
        try:
            return self._plan(method, path, query, headers, body, admission)
        except Exception as exc:
            # A bug here must not pass for an injected failure (a dropped connection would):
            # it is a 500 that says so, logged once with its traceback (never the body).
            logger.exception("faux provider: internal error on %s %s", method, path)
            return 0.0, json_response(
                500, {"error": "faux internal error"}, {_INTERNAL_ERROR_HEADER: type(exc).__name__}
            )

    def _plan(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None,
    ) -> tuple[float, Outcome]:
        lowered = {k.lower(): v for k, v in headers.items()}
        method = method.upper()
        system_one = SYSTEM_ONE_FLAVOURS.get(path)
        chat_path = path if path in CHAT_PATHS else None
        if system_one is not None or path == wire.PATH_DECISIONS or chat_path:
            if method != "POST":
                return 0.0, self._plain(405, "method not allowed")
            return self._decision(
                system_one, admission or self._admit(lowered), lowered, body, chat_path
            )
        route = self._route_table.get(path)
        if route is None:
            return 0.0, self._plain(404, "not found")
        handler = route.get(method)
        if handler is None:
            return 0.0, self._plain(405, "method not allowed")
        return 0.0, handler(query, body)

    def handle(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None = None,
    ) -> Outcome:
        """``plan``, then block for its delay. For threads; the server uses ``handle_async``."""
        delay, outcome = self.plan(method, path, query, headers, body, admission)
        if delay > 0:
            with self.waiting():
                time.sleep(delay)
        return outcome

    async def handle_async(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None = None,
    ) -> Outcome:
        delay, outcome = self.plan(method, path, query, headers, body, admission)
        if delay > 0:
            with self.waiting():
                await asyncio.sleep(delay)
        return outcome

    def transport(self) -> httpx.MockTransport:
        """An in-process transport for ``httpx.Client`` and ``httpx.AsyncClient``."""
        from .transport import FauxTransport

        return FauxTransport(self)

    # --- decision endpoints --------------------------------------------------------------
    def _decision(
        self,
        system_one: wire.Flavour | None,
        admission: Admission,
        headers: Mapping[str, str],
        body: bytes,
        chat_path: str | None = None,
    ) -> tuple[float, Outcome]:
        mode, behaviour = admission.mode, admission.behaviour
        if mode == "drop_before_read":
            return 0.0, FauxDrop(read=False)
        wait_s = self.rate_limit.check()
        if wait_s is not None:
            # Over the faux's rate: refused unprocessed, so not counted as a request read.
            headers_429 = {"retry-after": retry_after(round(wait_s, 3))}
            return 0.0, json_response(429, {"error": "rate limit exceeded"}, headers_429)

        parsed = parse_body(body)
        digest = sha256_hex(body) if parsed is NO_JSON else digest_of(parsed)
        self._counters.record(digest, admission.call_key)
        delay = behaviour.latency_s
        if mode == "drop_after_read":
            return delay, FauxDrop(read=True)
        if mode == "reset_after_read":
            return delay, FauxDrop(read=True, reset=True)
        if chat_path is not None:
            wait = behaviour.retry_after_s
            return delay, self.chat.respond(
                chat_path, mode, None if wait is None else retry_after(wait), behaviour.status,
                headers, body, None if parsed is NO_JSON else parsed, admission.call_key,
            )
        if self._replay is not None and mode == "ok":
            return delay, self._replay.answer(digest, None if parsed is NO_JSON else parsed)
        flavour = system_one or decisions_flavour(parsed)
        return delay, self._answer(flavour, mode, behaviour, headers, body, parsed)

    def _answer(
        self,
        flavour: wire.Flavour,
        mode: str,
        behaviour: FauxBehaviour,
        headers: Mapping[str, str],
        raw: bytes,
        parsed: Any,
    ) -> FauxResponse:
        extra: dict[str, str] = {}
        if flavour == "typesafe":
            extra[wire.TYPESAFE_REQUEST_ID_HEADER] = f"req_{secrets.token_hex(12)}"

        def error(status: int, message: str | None = None, loc: Any = None) -> FauxResponse:
            return json_response(status, error_body(flavour, status, message, loc=loc), extra)

        if len(raw) > wire.MAX_BODY_BYTES:
            return error(413)
        if not authorised(flavour, headers):
            return error(401)
        if mode in ("rate_limit", "status"):
            if behaviour.retry_after_s is not None:
                extra["retry-after"] = retry_after(behaviour.retry_after_s)
            return error(429 if mode == "rate_limit" else behaviour.status)
        if mode in ("garbage", "deep_json"):
            bad = GARBAGE_BODY if mode == "garbage" else DEEP_JSON_BODY
            return FauxResponse(200, {"content-type": "application/json", **extra}, bad)

        invalid_status = 422 if flavour == "typesafe" else 400
        if parsed is NO_JSON:
            return error(invalid_status, "body is not JSON")
        try:
            body = self._validated(flavour, parsed, headers)
        except RequestProblem as problem:
            return error(invalid_status, problem.message, problem.loc)
        except _ImageProblem as problem:
            return error(400, problem.problem.message, problem.problem.loc)

        refused: Collection[str] = ()
        if mode == "refuse":
            ids = question_ids(flavour, body)
            wanted = set(behaviour.refuse_questions)
            refused = {qid for qid in ids if qid in wanted} if wanted else set(ids)
        spoil = mode == "bad_probabilities"
        return json_response(200, self._response(flavour, body, refused, spoil), extra)

    @staticmethod
    def _validated(
        flavour: wire.Flavour, parsed: Any, headers: Mapping[str, str]
    ) -> Mapping[str, Any]:
        if flavour == "openai":
            return check_openai(parsed)
        if flavour == "parallel":
            return check_parallel(parsed)
        body = check_system_one(parsed, require_model=flavour == "openrouter")
        try:
            check_images(body, headers, body.get("model"))
        except RequestProblem as problem:
            # Image problems are 400 on every host, even where validation is a 422.
            raise _ImageProblem(problem) from None
        return body

    @staticmethod
    def _response(
        flavour: wire.Flavour, body: Mapping[str, Any], refused: Collection[str], spoil: bool
    ) -> dict[str, Any]:
        if flavour == "typesafe":
            return system_one_response(body, refused=refused, spoil=spoil)
        request_id = secrets.token_hex(16)
        if flavour == "openrouter":
            return openrouter_response(
                body, refused=refused, spoil=spoil,
                request_id=wire.OPENROUTER_ID_PREFIX + request_id[:24],
            )
        if flavour == "parallel":
            return parallel_response(
                body, refused=refused, spoil=spoil,
                request_id=wire.PARALLEL_REQUEST_ID_PREFIX + request_id,
            )
        return openai_response(
            body, refused=refused, spoil=spoil, request_id=wire.OPENAI_ID_PREFIX + request_id
        )


class _ImageProblem(Exception):
    def __init__(self, problem: RequestProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem
