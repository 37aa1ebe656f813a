"""``FauxProvider``: the other side of the wire, independent of any transport.

``plan`` turns one HTTP request into an outcome and the delay before it; ``handle`` and
``handle_async`` wait out the delay (blocking or with asyncio) and return the outcome. The
server and the in-process transport both play outcomes; neither decides anything.

Decision endpoints, in the order a request meets them: its *admission* once its head is
in (which behaviour applies, and whether ``fail_first`` leaves its mode in force), where
``drop_before_read`` ends it (not counted: the body was never read); then counting by body
digest and call key, latency, the connection-level modes, size, auth, the error modes,
validation (with images), and the answer (``ok``, ``refuse``, ``bad_probabilities``).
With ``replay`` (a directory of recordings, ``worker.faux.replay``), a request in mode
``ok`` gets its recorded response instead of a made-up one, or a loud miss; the failure
modes still apply first, so a test can inject a 503 while replaying.
Control endpoints (``/_faux/...``) and catalogs never misbehave, so a test can always
reach them, whatever the behaviour.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from pydantic import ValidationError

from shared.canonical import digest_of, sha256_hex

from . import wire
from .behaviour import FauxBehaviour, FauxMode
from .catalog import openrouter_catalog, typesafe_models
from .chat import CHAT_PATHS, FauxChat
from .counters import Counters
from .envelopes import error_body
from .images import check_images
from .outcome import FauxDrop, FauxResponse, Outcome, json_response
from .ratelimit import RateLimit
from .replay import ReplayMiss, ReplayStore
from .responses import (
    openai_question_id,
    openai_response,
    openrouter_response,
    parallel_response,
    system_one_response,
)
from .validate import RequestProblem, check_openai, check_parallel, check_system_one

if TYPE_CHECKING:
    import httpx

__all__ = ["Admission", "FauxProvider"]

#: ``garbage``: a 200 that claims JSON and is not (a truncated body, as a cut proxy gives).
GARBAGE_BODY: Final = b'{"answers": {"q": <faux garbage'

_SYSTEM_ONE_FLAVOURS: Final[dict[str, wire.Flavour]] = {
    wire.PATH_SYSTEM_ONE: "typesafe",
    wire.PATH_OPENROUTER_SYSTEM_ONE: "openrouter",
}

_NO_JSON: Final = object()
_INTERNAL_ERROR_HEADER: Final = "x-faux-internal-error"

logger = logging.getLogger(__name__)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return _NO_JSON


def _retry_after(seconds: float) -> str:
    # Whole seconds as HTTP says; a fraction is kept (not rounded up) so tests can wait less
    # than a second; clients that only take integers should be given integers.
    return str(int(seconds)) if seconds == int(seconds) else f"{seconds:g}"


def _authorised(flavour: wire.Flavour, headers: Mapping[str, str]) -> bool:
    scheme, _, key = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and key.strip():
        return True
    return flavour == "parallel" and bool(headers.get(wire.API_KEY_HEADER, "").strip())


def _decisions_flavour(parsed: Any) -> wire.Flavour:
    if isinstance(parsed, dict) and (
        isinstance(parsed.get("questions"), list) or ("input" in parsed and "state" not in parsed)
    ):
        return "openai"
    return "parallel"


def _question_ids(flavour: wire.Flavour, body: Mapping[str, Any]) -> list[str]:
    if flavour == "openai":
        return [openai_question_id(q, i) for i, q in enumerate(body["questions"])]
    return list(body["questions"])


@dataclass(frozen=True, slots=True)
class Admission:
    """What a decision request gets, decided once its head is in (before its body)."""

    behaviour: FauxBehaviour
    #: ``behaviour.mode``, or ``ok`` once ``fail_first`` is spent.
    mode: FauxMode
    call_key: str | None

    @property
    def dropped(self) -> bool:
        """Close the connection now, without reading the body (and without counting)."""
        return self.mode == "drop_before_read"


def _call_key(headers: Mapping[str, str]) -> str | None:
    call_key = headers.get(wire.CALL_KEY_HEADER)
    if call_key is not None and "%" in call_key:
        # Providers percent-encode what is not printable ASCII (and "%" itself).
        return unquote(call_key)
    return call_key


def _is_decision(method: str, path: str) -> bool:
    return method.upper() == "POST" and (
        path in _SYSTEM_ONE_FLAVOURS or path == wire.PATH_DECISIONS or path in CHAT_PATHS
    )


class FauxProvider:
    """A fake decision API: stable made-up answers, counts, and injected failures."""

    def __init__(
        self,
        behaviour: FauxBehaviour | None = None,
        *,
        replay: ReplayStore | Path | str | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self._behaviour = behaviour or FauxBehaviour()
        #: Requests a second past which the faux answers 429 (``worker.faux.ratelimit``).
        self.rate_limit = rate_limit or RateLimit()
        if replay is not None and not isinstance(replay, ReplayStore):
            replay = ReplayStore(replay)
        self._replay: ReplayStore | None = replay
        self._counters = Counters()
        #: The chat-completions endpoint's scripted replies (``worker.faux.chat``).
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
        if not _is_decision(method, path):
            return None
        return self._admit({k.lower(): v for k, v in headers.items()})

    def _admit(self, headers: Mapping[str, str]) -> Admission:
        call_key = _call_key(headers)
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
        system_one = _SYSTEM_ONE_FLAVOURS.get(path)
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
            headers_429 = {"retry-after": _retry_after(round(wait_s, 3))}
            return 0.0, json_response(429, {"error": "rate limit exceeded"}, headers_429)

        parsed = _parse(body)
        digest = sha256_hex(body) if parsed is _NO_JSON else digest_of(parsed)
        self._counters.record(digest, admission.call_key)
        delay = behaviour.latency_s
        if mode == "drop_after_read":
            return delay, FauxDrop(read=True)
        if mode == "reset_after_read":
            return delay, FauxDrop(read=True, reset=True)
        if chat_path is not None:
            wait = behaviour.retry_after_s
            return delay, self.chat.respond(
                chat_path, mode, None if wait is None else _retry_after(wait), behaviour.status,
                headers, body, None if parsed is _NO_JSON else parsed, admission.call_key,
            )
        if self._replay is not None and mode == "ok":
            return delay, self._replay.answer(digest, None if parsed is _NO_JSON else parsed)
        flavour = system_one or _decisions_flavour(parsed)
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
        if not _authorised(flavour, headers):
            return error(401)
        if mode in ("rate_limit", "status"):
            if behaviour.retry_after_s is not None:
                extra["retry-after"] = _retry_after(behaviour.retry_after_s)
            return error(429 if mode == "rate_limit" else behaviour.status)
        if mode == "garbage":
            return FauxResponse(200, {"content-type": "application/json", **extra}, GARBAGE_BODY)

        invalid_status = 422 if flavour == "typesafe" else 400
        if parsed is _NO_JSON:
            return error(invalid_status, "body is not JSON")
        try:
            body = self._validated(flavour, parsed, headers)
        except RequestProblem as problem:
            return error(invalid_status, problem.message, problem.loc)
        except _ImageProblem as problem:
            return error(400, problem.problem.message, problem.problem.loc)

        refused: Collection[str] = ()
        if mode == "refuse":
            ids = _question_ids(flavour, body)
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

    # --- everything else -----------------------------------------------------------------
    @staticmethod
    def _plain(status: int, message: str) -> FauxResponse:
        return json_response(status, {"error": message})

    def _routes(
        self,
    ) -> dict[str, dict[str, Callable[[Mapping[str, str], bytes], FauxResponse]]]:
        return {
            wire.PATH_TYPESAFE_MODELS: {
                "GET": lambda q, b: json_response(200, typesafe_models(q.get("output_modalities")))
            },
            wire.PATH_OPENROUTER_MODELS: {
                "GET": lambda q, b: json_response(
                    200, openrouter_catalog(q.get("output_modalities"))
                )
            },
            "/_faux/health": {"GET": lambda q, b: json_response(200, {"status": "ok"})},
            "/_faux/requests": {"GET": lambda q, b: json_response(200, self.requests())},
            "/_faux/calls": {"GET": lambda q, b: json_response(200, self.calls())},
            "/_faux/behaviour": {
                "GET": lambda q, b: self._behaviour_response(),
                "PUT": lambda q, b: self._put_behaviour(b, merge=False),
                "PATCH": lambda q, b: self._put_behaviour(b, merge=True),
            },
            "/_faux/reset": {"POST": lambda q, b: self._reset_response()},
            "/_faux/chat": {
                "GET": lambda q, b: self.chat.behaviour_response(),
                "PUT": lambda q, b: self.chat.put_behaviour(b, merge=False),
                "PATCH": lambda q, b: self.chat.put_behaviour(b, merge=True),
            },
            "/_faux/replay": {"GET": lambda q, b: self._replay_response()},
            "/_faux/rate-limit": {
                "GET": lambda q, b: json_response(200, self.rate_limit.snapshot()),
                "PUT": lambda q, b: self._put_rate_limit(b),
            },
        }

    def _put_rate_limit(self, raw: bytes) -> FauxResponse:
        parsed = _parse(raw)
        per_second = parsed.get("per_second") if isinstance(parsed, dict) else _NO_JSON
        if per_second is not None and (
            isinstance(per_second, bool) or not isinstance(per_second, int) or per_second < 1
        ):
            return self._plain(400, 'the body must be {"per_second": a whole number >= 1 or null}')
        self.rate_limit.configure(per_second)
        return json_response(200, self.rate_limit.snapshot())

    def _behaviour_response(self) -> FauxResponse:
        return json_response(200, self._behaviour.model_dump(mode="json"))

    def _put_behaviour(self, raw: bytes, *, merge: bool) -> FauxResponse:
        parsed = _parse(raw) if raw.strip() else {}
        if not isinstance(parsed, dict):
            return self._plain(400, "the body must be a JSON object of FauxBehaviour fields")
        try:
            if merge:
                self.update_behaviour(**parsed)
            else:
                self.set_behaviour(FauxBehaviour.model_validate(parsed))
        except ValidationError as exc:
            errors = [
                {"loc": [str(p) for p in e["loc"]], "message": e["msg"]} for e in exc.errors()
            ]
            return json_response(422, {"error": "invalid behaviour", "problems": errors})
        return self._behaviour_response()

    def _replay_response(self) -> FauxResponse:
        store = self._replay
        if store is None:
            return json_response(200, {"directory": None, "recordings": 0, "misses": []})
        return json_response(
            200,
            {
                "directory": str(store.directory),
                "recordings": len(store),
                "misses": [m.as_json() for m in store.misses()],
            },
        )

    def _reset_response(self) -> FauxResponse:
        self.reset()
        return json_response(200, {"reset": True})


class _ImageProblem(Exception):
    def __init__(self, problem: RequestProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem
