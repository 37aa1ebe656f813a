"""OpenAI Decisions (public beta): ``POST {base}/v1/decisions``, Bearer ``OPENAI_API_KEY``.

The System One shape is mapped to OpenAI's array shape and the answers back:

- the keyed questions become an array in the same order, each with ``name`` = its id;
- ``noul`` is ``predicate``; a noul's ``criteria`` (``{true?, false?}``) has no place in a
  predicate, so it is appended to the instructions as "Yes means: ... / No means: ...";
- a choice's ``criteria`` map is ``choices: [{value, description?}]`` (a null description is
  left out); a score's ``criteria`` list is ``levels: [{label}]``;
- ``instructions`` that are an object or an array, and a state that is, go as their
  canonical JSON text (``input`` and ``instructions`` are strings here);
- answers are matched by ``name`` (by position when an answer has none) and mapped back to
  the System One shape, then decoded like every other provider's; a ``refusal`` is refused,
  and a question left without an answer is ``invalid_response`` (OpenAI refuses explicitly).

Cost: OpenAI's price is $0.10 per million input tokens, output free (``settings.
openai_price_per_mtok_usd``). The response's ``usage.input_tokens`` times that price is
booked as an ``estimate`` (the price is ours, not a reported charge); without usage, and for
a request whose outcome is unknown, the request's estimated input tokens are used
(``shared.tokens``), also as an ``estimate``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import httpx

from shared.canonical import canonical_bytes
from shared.decoding import MissingAnswer, decode_answers
from shared.errors import DecisionProviderError
from shared.replies import Answer, CostBasis
from shared.settings import Settings
from shared.tokens import estimate_tokens
from worker.providers.base import DecisionRequest, PreparedRequest, ProviderLimits
from worker.providers.httpbase import HttpDecisionProvider, per_token_worst
from worker.providers.limiter import Limiter
from worker.providers.limits import check_limits
from worker.providers.outbound import (
    AuthSpec,
    ErrorDetails,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
)

__all__ = ["OPENAI_KEY_ENV", "OPENAI_LIMITS", "OpenAIDecisionsProvider", "to_openai_question"]

OPENAI_KEY_ENV: Final = "OPENAI_API_KEY"
OPENAI_PATH: Final = "/v1/decisions"
#: OpenAI's request id header (kept as the error's ``ref_id``).
REQUEST_ID_HEADER: Final = "x-request-id"
OPENAI_LIMITS: Final = ProviderLimits(
    min_choice_options=2, max_choice_options=255, min_score_levels=2, max_score_levels=10
)
_TYPES_BACK: Final = {"predicate": "noul", "choice": "choice", "score": "score"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_bytes(value).decode("utf-8")


def to_openai_question(qid: str, question: Mapping[str, Any]) -> dict[str, Any]:
    """One System One question in OpenAI's array shape."""
    kind = question["type"]
    instructions = _text(question["instructions"])
    if kind == "noul":
        criteria = question.get("criteria") or {}
        meanings = [
            f"{label} means: {criteria[key]}"
            for key, label in (("true", "Yes"), ("false", "No"))
            if isinstance(criteria.get(key), str)
        ]
        if meanings:
            instructions = instructions + "\n\n" + "\n".join(meanings)
        return {"type": "predicate", "name": qid, "instructions": instructions}
    if kind == "choice":
        choices = []
        for option, description in question["criteria"].items():
            choice: dict[str, Any] = {"value": option}
            if isinstance(description, str):
                choice["description"] = description
            choices.append(choice)
        return {"type": "choice", "name": qid, "instructions": instructions, "choices": choices}
    return {
        "type": "score",
        "name": qid,
        "instructions": instructions,
        "levels": [{"label": label} for label in question["criteria"]],
    }


def _choice_key(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _pairs(raw: Any, key: Any) -> Any:
    """``[{value, probability}]`` as ``{key(value): probability}``; anything else as it is, so
    the decoder names what is wrong."""
    if not isinstance(raw, list):
        return raw
    out: dict[Any, Any] = {}
    for item in raw:
        if not isinstance(item, dict) or "value" not in item:
            return None
        k = key(item["value"])
        if not isinstance(k, str) or k in out:
            return None
        out[k] = item.get("probability")
    return out


def from_openai_answer(answer: Any) -> Any:
    """One OpenAI answer in the System One shape (what does not fit is left to fail)."""
    if not isinstance(answer, dict):
        return answer
    kind = answer.get("type")
    if kind == "refusal":
        return {"type": "refusal"}
    out: dict[str, Any] = {"type": _TYPES_BACK.get(kind, kind) if isinstance(kind, str) else kind}
    if "confidence" in answer:
        out["confidence"] = answer["confidence"]
    if kind == "predicate":
        out["noul"] = answer.get("probability")
    elif kind == "choice":
        out["choice"] = _choice_key(answer.get("choice"))
        out["probabilities"] = _pairs(answer.get("probabilities"), _choice_key)
    elif kind == "score":
        out["score"] = answer.get("score")
        out["probabilities"] = _pairs(
            answer.get("probabilities"),
            lambda v: str(v) if isinstance(v, int) and not isinstance(v, bool) else None,
        )
    return out


class OpenAIDecisionsProvider(HttpDecisionProvider):
    #: OpenAI answers a refused question ``{"type": "refusal", "name"}``; one left out does
    #: not match the questions.
    missing_answer: ClassVar[MissingAnswer] = "invalid_response"

    def __init__(
        self,
        *,
        http: httpx.AsyncClient,
        base_url: str = "https://api.openai.com",
        default_model: str = "gpt-6-luna",
        price_per_mtok_usd: float = 0.10,
        name: str = "openai",
        key_env: str = OPENAI_KEY_ENV,
        policy: TransportPolicy | None = None,
        limiter: Limiter | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__(
            name, http=http, auth=AuthSpec(key_env, fixed_key=api_key), limits=OPENAI_LIMITS,
            policy=policy,
            limiter=limiter,
        )
        self.url = base_url.rstrip("/") + OPENAI_PATH
        self._default_model = default_model
        self.price_per_mtok_usd = price_per_mtok_usd

    @classmethod
    def from_settings(
        cls, settings: Settings, *, http: httpx.AsyncClient, limiter: Limiter | None = None
    ) -> OpenAIDecisionsProvider:
        return cls(
            http=http,
            base_url=settings.openai_base_url,
            default_model=settings.openai_default_model,
            price_per_mtok_usd=settings.openai_price_per_mtok_usd,
            policy=TransportPolicy.from_settings(settings),
            limiter=limiter,
        )

    def default_model(self) -> str | None:
        return self._default_model

    def prepare(self, request: DecisionRequest, *, step: str = "decide") -> PreparedRequest:
        if request.assets:
            raise DecisionProviderError(
                "invalid_request",
                "assets: images are not wired for OpenAI Decisions yet; nothing was sent",
                provider=self.name, field="assets",
            )
        questions = {qid: dict(q) for qid, q in request.questions.items()}
        check_limits(request.state, questions, self.limits, provider=self.name)
        model = self.resolve_model(request.model)
        body = {
            "model": model,
            "input": _text(request.state),
            "questions": [to_openai_question(qid, q) for qid, q in questions.items()],
        }
        return self._prepared(
            request, model=model, url=self.url, body=body,
            hints={"questions": questions, "order": list(questions), "step": step},
        )

    def _answers(self, prepared: PreparedRequest, body: Any) -> dict[str, Answer]:
        raw = body.get("answers") if isinstance(body, dict) else None
        if not isinstance(raw, list):
            raise DecisionProviderError(
                "invalid_response", "the response has no answers array", provider=self.name
            )
        order: list[str] = prepared.decode_hints["order"]
        keyed: dict[str, Any] = {}
        for index, answer in enumerate(raw):
            name = answer.get("name") if isinstance(answer, dict) else None
            if isinstance(name, str):
                qid = name
            elif index < len(order):
                qid = order[index]
            else:
                qid = f"#{index}"
            if qid in keyed:
                # Only a question's own id is quoted (a name the host made up is its words).
                said = f"answers.{qid}" if qid in order else "an answer to a question not asked"
                raise DecisionProviderError(
                    "invalid_response", f"{said}: answered twice", provider=self.name
                )
            keyed[qid] = from_openai_answer(answer)
        return decode_answers(
            prepared.decode_hints["questions"], keyed, provider=self.name,
            missing=self.missing_answer,
        )

    def _decision_id(self, response: TransportResponse, body: Any) -> str | None:
        found = body.get("id") if isinstance(body, dict) else None
        return found if isinstance(found, str) else None

    def _cost(
        self, prepared: PreparedRequest, body: Any
    ) -> tuple[float | None, CostBasis | None]:
        usage = body.get("usage") if isinstance(body, dict) else None
        tokens = usage.get("input_tokens") if isinstance(usage, dict) else None
        if not (
            isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
            and math.isfinite(tokens)
        ):
            tokens = estimate_tokens(len(prepared.body))
        return self.price_per_mtok_usd * tokens / 1_000_000, "estimate"

    def worst_cost(
        self, prepared: PreparedRequest, max_price_per_mtok_usd: float | None
    ) -> float | None:
        """The request's bytes at the configured maximum, else at OpenAI's price (output is
        free, and a token is at least a byte)."""
        ceiling = max_price_per_mtok_usd
        return per_token_worst(prepared, self.price_per_mtok_usd if ceiling is None else ceiling)

    def _unknown_cost(self, prepared: PreparedRequest) -> UnknownCost:
        tokens = estimate_tokens(len(prepared.body))
        return UnknownCost(self.price_per_mtok_usd * tokens / 1_000_000, "estimate")

    def _error_details(self, status: int, headers: httpx.Headers, body: bytes) -> ErrorDetails:
        kind = None
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            kind = error["type"]
        return ErrorDetails(ref_id=headers.get(REQUEST_ID_HEADER), kind=kind)
