"""The faux's control endpoints (``/_faux/...``) and catalogs: they never misbehave, so a
test can always reach them, whatever the behaviour. A part of ``FauxProvider``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from worker.testing.faux import wire
from worker.testing.faux.behaviour import FauxBehaviour
from worker.testing.faux.catalog import openrouter_catalog, typesafe_models
from worker.testing.faux.outcome import FauxResponse, json_response
from worker.testing.faux.reading import NO_JSON, parse_body

if TYPE_CHECKING:
    from worker.testing.faux.chat import FauxChat
    from worker.testing.faux.ratelimit import RateLimit
    from worker.testing.faux.replay import ReplayStore

__all__ = ["FauxControl"]


class FauxControl:
    """The control routes of a ``FauxProvider`` (which provides the state they read)."""

    _behaviour: FauxBehaviour
    _replay: ReplayStore | None
    chat: FauxChat
    rate_limit: RateLimit

    def requests(self) -> dict[str, int]:
        raise NotImplementedError

    def calls(self) -> dict[str, int]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def set_behaviour(self, behaviour: FauxBehaviour) -> None:
        raise NotImplementedError

    def update_behaviour(self, **changes: object) -> FauxBehaviour:
        raise NotImplementedError

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
        parsed = parse_body(raw)
        per_second = parsed.get("per_second") if isinstance(parsed, dict) else NO_JSON
        if per_second is not None and (
            isinstance(per_second, bool) or not isinstance(per_second, int) or per_second < 1
        ):
            return self._plain(400, 'the body must be {"per_second": a whole number >= 1 or null}')
        self.rate_limit.configure(per_second)
        return json_response(200, self.rate_limit.snapshot())

    def _behaviour_response(self) -> FauxResponse:
        return json_response(200, self._behaviour.model_dump(mode="json"))

    def _put_behaviour(self, raw: bytes, *, merge: bool) -> FauxResponse:
        parsed = parse_body(raw) if raw.strip() else {}
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
