"""Parallel Decisions (``POST {base}/v1/decisions``): web-grounded noul, choice and score.

What it does with Parallel's answers (seed 004, "Parallel Decisions"):

- Limits, checked before sending (``invalid_request``, nothing sent): 1 to 100 questions,
  2 to 255 options, 2 to 10 levels, a question rendering past 5,000 characters (its
  canonical JSON as sent, see ``worker.providers.limits``), a state over 96,000 bytes.
  A choice option with no description is described by its own name.
- Model: the ``fast`` mode, declared as the model ``parallel-fast``. ``modes``
  (``settings.parallel_modes``) lists the modes a request may pin as ``parallel-<mode>``;
  none pinned asks the first; any other model is ``invalid_request`` before sending.
- Refusals are only an explicit ``{"type": "refusal"}`` and stay refusals; a question left
  out of ``answers`` is ``invalid_response`` (the table in ``shared.decoding``
  says which rule each provider follows). A missing confidence is derived from
  the probabilities and the receipt says so (``shared.decoding``).
- Citations apply to the whole request: each is ``Evidence(scope="call")``.
- Cost: the response carries none, so an answered request, and one whose outcome was
  lost, is booked at ``settings.parallel_list_price_usd`` as an ``estimate``. The decision
  id is the ``provider_request_id``.
- Errors: 401/403 ``auth``; 400/422 ``invalid_request`` with Parallel's ``ref_id`` and the
  body dropped; 429 per the replay policy; 408/5xx/lost connection ``outcome_unknown`` with
  the cost on the error.

Field names beyond ``answers`` and ``citations`` are not publicly documented; the ones here
are the faux's (``worker.testing.faux.wire``), kept as constants so a correction is one edit.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Final

import httpx

from shared.decoding import MissingAnswer, decode_answers
from shared.errors import DecisionProviderError
from shared.replies import Answer, CostBasis, Evidence
from shared.settings import Settings
from worker.providers.base import DecisionRequest, PreparedRequest, ProviderLimits
from worker.providers.httpbase import HttpDecisionProvider
from worker.providers.limiter import Limiter
from worker.providers.limits import check_limits
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetails,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
)

__all__ = [
    "PARALLEL_KEY_ENV",
    "PARALLEL_KEY_HEADER",
    "PARALLEL_LIMITS",
    "PARALLEL_MODEL_PREFIX",
    "PARALLEL_PATH",
    "ParallelProvider",
]

PARALLEL_KEY_ENV: Final = "PARALLEL_API_KEY"
#: *Unconfirmed*: Parallel's API takes an API-key header, "commonly x-api-key"; the raw key
#: is its whole value (no scheme). One constant to change if Parallel says otherwise.
PARALLEL_KEY_HEADER: Final = "x-api-key"
PARALLEL_PATH: Final = "/v1/decisions"
PARALLEL_MODEL_PREFIX: Final = "parallel-"
#: *Unconfirmed* field names (the faux's): the mode asked, the response's request id.
MODE_FIELD: Final = "mode"
REQUEST_ID_FIELD: Final = "provider_request_id"
CITATIONS_FIELD: Final = "citations"
INCLUDE_EXCERPTS_FIELD: Final = "include_excerpts"

PARALLEL_LIMITS: Final = ProviderLimits(
    max_questions=100,
    min_choice_options=2,
    max_choice_options=255,
    min_score_levels=2,
    max_score_levels=10,
    max_rendered_question_chars=5_000,
    max_state_bytes=96_000,
)


def described(question: dict[str, Any]) -> dict[str, Any]:
    """The question as Parallel gets it: an option without a description is its own name."""
    if question.get("type") != "choice" or not isinstance(question.get("criteria"), dict):
        return question
    out = dict(question)
    out["criteria"] = {
        option: description if isinstance(description, str) and description.strip() else option
        for option, description in question["criteria"].items()
    }
    return out


class ParallelProvider(HttpDecisionProvider):
    #: Parallel refuses with ``{"type": "refusal"}``; a question it left out is an answer
    #: set that does not match the questions (seed 004): ``invalid_response``.
    missing_answer: ClassVar[MissingAnswer] = "invalid_response"

    def __init__(
        self,
        *,
        http: httpx.AsyncClient,
        base_url: str = "https://api.parallel.ai",
        modes: tuple[str, ...] = ("fast",),
        list_price_usd: float = 0.001,
        name: str = "parallel",
        key_env: str = PARALLEL_KEY_ENV,
        policy: TransportPolicy | None = None,
        limiter: Limiter | None = None,
        api_key: str | None = None,
    ) -> None:
        if not modes:
            raise ValueError("Parallel needs at least one mode")
        super().__init__(
            name,
            http=http,
            # ``api_key`` (the seed's ``apiKey``) wins over the variable when given.
            auth=AuthSpec(key_env, header=PARALLEL_KEY_HEADER, scheme=None, fixed_key=api_key),
            limits=PARALLEL_LIMITS,
            policy=policy,
            limiter=limiter,
        )
        self.url = base_url.rstrip("/") + PARALLEL_PATH
        self.modes = tuple(modes)
        self.list_price_usd = list_price_usd

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        http: httpx.AsyncClient,
        limiter: Limiter | None = None,
    ) -> ParallelProvider:
        return cls(
            http=http,
            base_url=settings.parallel_base_url,
            modes=tuple(settings.parallel_modes),
            list_price_usd=settings.parallel_list_price_usd,
            policy=TransportPolicy.from_settings(settings),
            limiter=limiter,
        )

    def models(self) -> tuple[str, ...]:
        return tuple(PARALLEL_MODEL_PREFIX + mode for mode in self.modes)

    def default_model(self) -> str | None:
        return PARALLEL_MODEL_PREFIX + self.modes[0]

    def prepare(self, request: DecisionRequest, *, step: str = "decide") -> PreparedRequest:
        if request.assets:
            raise DecisionProviderError(
                "invalid_request", "assets: Parallel takes no images; nothing was sent",
                provider=self.name, field="assets",
            )
        questions = {qid: described(dict(q)) for qid, q in request.questions.items()}
        check_limits(request.state, questions, self.limits, provider=self.name)
        model = self.resolve_model(request.model)
        assert model is not None  # a default always exists
        body = {
            MODE_FIELD: model.removeprefix(PARALLEL_MODEL_PREFIX),
            "state": request.state,
            "questions": questions,
            INCLUDE_EXCERPTS_FIELD: True,
        }
        return self._prepared(
            request, model=model, url=self.url, body=body,
            hints={"questions": questions, "step": step},
        )

    def _answers(self, prepared: PreparedRequest, body: Any) -> dict[str, Answer]:
        if not isinstance(body, dict):
            raise DecisionProviderError(
                "invalid_response", "the response is not a JSON object", provider=self.name
            )
        return decode_answers(
            prepared.decode_hints["questions"], body.get("answers"), provider=self.name,
            missing=self.missing_answer,
        )

    def _answered_model(self, prepared: PreparedRequest, body: Any) -> str | None:
        mode = body.get(MODE_FIELD) if isinstance(body, dict) else None
        return PARALLEL_MODEL_PREFIX + mode if isinstance(mode, str) else prepared.model

    def _decision_id(self, response: TransportResponse, body: Any) -> str | None:
        found = body.get(REQUEST_ID_FIELD) if isinstance(body, dict) else None
        return found if isinstance(found, str) else None

    def _cost(
        self, prepared: PreparedRequest, body: Any
    ) -> tuple[float | None, CostBasis | None]:
        return self.list_price_usd, "estimate"

    def worst_cost(
        self, prepared: PreparedRequest, max_price_per_mtok_usd: float | None
    ) -> float | None:
        """Parallel's list price a request: what it is booked at, answered or lost."""
        return self.list_price_usd

    def _unknown_cost(self, prepared: PreparedRequest) -> UnknownCost:
        # Parallel may have answered (and charged) it: its list price, as an estimate.
        return UnknownCost(self.list_price_usd, "estimate")

    def _evidence(self, body: Any) -> list[Evidence]:
        citations = body.get(CITATIONS_FIELD) if isinstance(body, dict) else None
        if not isinstance(citations, list):
            return []
        evidence = []
        for citation in citations:
            if not isinstance(citation, dict) or not isinstance(citation.get("url"), str):
                continue
            title = citation.get("title")
            excerpts = citation.get("excerpts")
            evidence.append(
                Evidence(
                    url=citation["url"],
                    title=title if isinstance(title, str) else None,
                    excerpts=[e for e in excerpts if isinstance(e, str)]
                    if isinstance(excerpts, list) else [],
                    scope="call",
                    question=None,
                )
            )
        return evidence

    def _error_details(self, status: int, headers: httpx.Headers, body: bytes) -> ErrorDetails:
        try:
            parsed = json.loads(body)
        except ValueError:
            return ErrorDetails()
        error = parsed.get("error") if isinstance(parsed, dict) else None
        ref_id = error.get("ref_id") if isinstance(error, dict) else None
        return ErrorDetails(ref_id=ref_id if isinstance(ref_id, str) else None)
