"""System One hosts: ``POST {base}{path}`` with ``{model, state, questions}``.

One provider class covers every host of the contract, configured by name, base URL, key
variable, default model, models served, price and request-id header:

- ``openrouter``: a model is required (a request naming none is refused before sending,
  unless a default is configured); ``usage.cost`` is booked ``reported``; a response without
  it is an unknown cost (null, never 0); the decision id is the body's ``id``; images go as
  JSON ``assets`` to models the catalog lists with image input.
- ``typesafe``: the request id is the ``x-typesafe-request-id`` header; the body has no
  cost, so ``usage.input_tokens`` is booked at ``typesafe_price_per_mtok_usd`` as an
  ``estimate``.
- any host of ``settings.systemone_hosts``.
- ``faux``: the fake System One host (``worker.testing.faux``), at ``settings.faux_url`` or
  in-process.

Cost, for every flavour: a reported ``usage.cost`` wins (``reported``); else a configured
price times ``usage.input_tokens`` (or, without usage, the request's estimated input tokens,
``shared.tokens``) is an ``estimate``; else the cost is unknown (null). A request
whose outcome is unknown is booked at the price times the request's estimated input tokens
where a price is configured (TypeSafe: the host may have charged exactly that), and at an
unknown cost otherwise (OpenRouter: its cost comes only with the answer).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import httpx

from shared.decoding import decode_answers
from shared.errors import DecisionProviderError
from shared.replies import Answer, CostBasis
from shared.setting_types import SystemOneHost
from shared.settings import Settings
from shared.tokens import estimate_tokens
from worker.providers.base import DecisionRequest, PreparedRequest, ProviderLimits
from worker.providers.catalog import CATALOG_PATH, ModelCatalog
from worker.providers.httpbase import HttpDecisionProvider, per_token_worst
from worker.providers.images import DANGER_ZONE_IMAGES_HEADER, plan_images
from worker.providers.limiter import Limiter
from worker.providers.limits import check_limits
from worker.providers.outbound import (
    FAUX_KEY,
    AuthSpec,
    ErrorDetails,
    TransportPolicy,
    TransportResponse,
    UnknownCost,
)

__all__ = [
    "FAUX_DEFAULT_MODEL",
    "FAUX_IN_PROCESS_URL",
    "FAUX_KEY",
    "SYSTEM_ONE_LIMITS",
    "TYPESAFE_REQUEST_ID_HEADER",
    "SystemOneConfig",
    "SystemOneProvider",
    "faux_api_base",
]

TYPESAFE_REQUEST_ID_HEADER: Final = "x-typesafe-request-id"
#: The faux answers a request naming no model as this one
#: (``worker.testing.faux.wire.DEFAULT_MODEL``).
FAUX_DEFAULT_MODEL: Final = "faux-1"
#: Base URL of the in-process faux; ``.invalid`` never resolves, so nothing can leave.
FAUX_IN_PROCESS_URL: Final = "http://faux.invalid"


def faux_api_base(settings: Settings) -> str:
    """The faux's OpenRouter-flavoured base (``.../api``): its server, or the in-process one."""
    return (settings.faux_url or FAUX_IN_PROCESS_URL).rstrip("/") + "/api"
#: The contract's own limits (every System One host): 1 to 255 options, 2 to 10 levels.
SYSTEM_ONE_LIMITS: Final = ProviderLimits(
    min_choice_options=1, max_choice_options=255, min_score_levels=2, max_score_levels=10
)


@dataclass(frozen=True)
class SystemOneConfig:
    name: str
    base_url: str
    #: The key's variable, read by name at send time; ``None``: the host takes no key (faux).
    key_env: str | None
    path: str = "/v1/systemone"
    default_model: str | None = None
    #: Models served; empty means any model the host knows.
    models: tuple[str, ...] = ()
    #: USD per million input tokens, booked as an estimate when the host reports no cost.
    price_per_mtok_usd: float | None = None
    #: Response header carrying the request id (TypeSafe); else the body's ``id``.
    request_id_header: str | None = None
    #: Takes image ``assets`` in the JSON body (OpenRouter's way).
    images: bool = False
    #: The public catalog, relative to ``base_url``; says which models take images.
    catalog_path: str | None = None
    #: Per-model override of the catalog's word on image input.
    image_models: Mapping[str, bool] = field(default_factory=dict)
    #: OpenRouter: the USD per million prompt tokens sent as its ``provider.max_price``
    #: routing option (``settings.openrouter_max_price_routing``), so that it never routes a
    #: request to an endpoint above the maximum a budget reserved for.
    max_price_routing: float | None = None
    limits: ProviderLimits = SYSTEM_ONE_LIMITS

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.path

    @classmethod
    def openrouter(cls, settings: Settings) -> SystemOneConfig:
        return cls(
            name="openrouter",
            base_url=settings.openrouter_base_url,
            key_env="OPENROUTER_API_KEY",
            default_model=settings.openrouter_default_model,
            images=True,
            catalog_path=CATALOG_PATH,
            max_price_routing=(
                settings.max_price_per_mtok_usd.get("openrouter")
                if settings.openrouter_max_price_routing
                else None
            ),
        )

    @classmethod
    def typesafe(cls, settings: Settings) -> SystemOneConfig:
        return cls(
            name="typesafe",
            base_url=settings.typesafe_base_url,
            key_env="TYPESAFE_API_KEY",
            default_model=settings.typesafe_default_model,
            price_per_mtok_usd=settings.typesafe_price_per_mtok_usd,
            request_id_header=TYPESAFE_REQUEST_ID_HEADER,
        )

    @classmethod
    def faux(cls, settings: Settings) -> SystemOneConfig:
        """The faux as OpenRouter (``/api/v1/systemone``): ids, reported cost, a catalog."""
        base = faux_api_base(settings)
        return cls(
            name="faux",
            base_url=base,
            key_env=None,
            default_model=FAUX_DEFAULT_MODEL,
            images=True,
            catalog_path=CATALOG_PATH,
        )

    @classmethod
    def host(cls, name: str, host: SystemOneHost) -> SystemOneConfig:
        return cls(
            name=name,
            base_url=host.base_url,
            key_env=host.key_env,
            path=host.path,
            default_model=host.default_model,
            models=tuple(host.models),
            price_per_mtok_usd=host.price_per_mtok_usd,
            request_id_header=host.request_id_header,
        )


class SystemOneProvider(HttpDecisionProvider):
    def __init__(
        self,
        config: SystemOneConfig,
        *,
        http: httpx.AsyncClient,
        policy: TransportPolicy | None = None,
        limiter: Limiter | None = None,
        catalog: ModelCatalog | None = None,
        api_key: str | None = None,
    ) -> None:
        # ``api_key`` (the seed's ``apiKey``) wins over the variable when given.
        if config.key_env:
            auth = AuthSpec(config.key_env, fixed_key=api_key)
        else:
            auth = AuthSpec(None, fixed_key=api_key or FAUX_KEY)
        super().__init__(
            config.name, http=http, auth=auth, limits=config.limits, policy=policy,
            limiter=limiter,
        )
        self.config = config
        self.experimental_inputs = ("image",) if config.images else ()
        self.catalog = catalog
        if catalog is None and config.images and config.catalog_path:
            self.catalog = ModelCatalog(
                http, config.base_url.rstrip("/") + config.catalog_path, provider=config.name,
                max_bytes=self.policy.max_response_bytes,
            )

    def models(self) -> tuple[str, ...]:
        return self.config.models

    def default_model(self) -> str | None:
        return self.config.default_model

    # --- prepare: pure ----------------------------------------------------------------------

    def prepare(self, request: DecisionRequest, *, step: str = "decide") -> PreparedRequest:
        questions = {qid: dict(q) for qid, q in request.questions.items()}
        check_limits(request.state, questions, self.limits, provider=self.name)
        model = self.resolve_model(request.model)
        body: dict[str, Any] = {"state": request.state, "questions": questions}
        if model is not None:
            body["model"] = model
        if self.config.max_price_routing is not None:
            body["provider"] = {"max_price": {"prompt": self.config.max_price_routing}}
        headers: dict[str, str] = {}
        hints: dict[str, Any] = {"questions": questions, "step": step}
        if request.assets is not None:
            if not self.config.images:
                raise DecisionProviderError(
                    "invalid_request",
                    f"assets: {self.name} takes no images; nothing was sent",
                    provider=self.name, field="assets",
                )
            plan = plan_images(
                request.state, questions, request.assets, model=model, provider=self.name
            )
            body["state"] = plan.state
            body["assets"] = plan.assets
            headers[DANGER_ZONE_IMAGES_HEADER] = "true"
            hints["images"] = True
        return self._prepared(
            request, model=model, url=self.config.url, body=body, headers=headers, hints=hints
        )

    # --- send: the image check before the paid request --------------------------------------

    async def _before_send(self, prepared: PreparedRequest, deadline: datetime) -> None:
        if not prepared.decode_hints.get("images"):
            return
        model = prepared.model or ""
        override = self.config.image_models.get(model)
        if override is None:
            if self.catalog is None:
                takes = False
            else:
                wait_s = (deadline - datetime.now(UTC)).total_seconds()
                modalities = await self.catalog.input_modalities(model, wait_s=wait_s)
                takes = modalities is not None and "image" in modalities
        else:
            takes = override
        if not takes:
            raise DecisionProviderError(
                "invalid_request",
                f"model: {model!r} takes no image input (per the catalog); nothing was sent",
                provider=self.name, field="model",
            )

    # --- reading the answer -----------------------------------------------------------------

    def _answers(self, prepared: PreparedRequest, body: Any) -> dict[str, Answer]:
        if not isinstance(body, dict):
            raise DecisionProviderError(
                "invalid_response", "the response is not a JSON object", provider=self.name
            )
        return decode_answers(
            prepared.decode_hints["questions"], body.get("answers"), provider=self.name,
            missing=self.missing_answer,
        )

    def _decision_id(self, response: TransportResponse, body: Any) -> str | None:
        if self.config.request_id_header:
            from_header = response.headers.get(self.config.request_id_header)
            if from_header:
                return from_header
        found = body.get("id") if isinstance(body, dict) else None
        return found if isinstance(found, str) else None

    def _cost(
        self, prepared: PreparedRequest, body: Any
    ) -> tuple[float | None, CostBasis | None]:
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        reported = usage.get("cost")
        if isinstance(reported, int | float) and _non_negative(reported):
            return float(reported), "reported"
        price = self.config.price_per_mtok_usd
        if price is None:
            return None, None
        tokens = usage.get("input_tokens")
        if not (_non_negative(tokens) and isinstance(tokens, int)):
            tokens = estimate_tokens(len(prepared.body))
        return price * tokens / 1_000_000, "estimate"

    def worst_cost(
        self, prepared: PreparedRequest, max_price_per_mtok_usd: float | None
    ) -> float | None:
        """The request's bytes at the configured maximum, else at the host's own price (a
        host booked by its price can charge no more); None for a host with neither
        (OpenRouter: configure ``max_price_per_mtok_usd``)."""
        price = max_price_per_mtok_usd
        if price is None:
            price = self.config.price_per_mtok_usd
        return per_token_worst(prepared, price)

    def _unknown_cost(self, prepared: PreparedRequest) -> UnknownCost:
        price = self.config.price_per_mtok_usd
        if price is None:
            return UnknownCost()
        return UnknownCost(price * estimate_tokens(len(prepared.body)) / 1_000_000, "estimate")

    def _error_details(self, status: int, headers: httpx.Headers, body: bytes) -> ErrorDetails:
        header = self.config.request_id_header
        ref_id = headers.get(header) if header else None
        kind: str | None = None
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            detail = parsed.get("detail")
            if isinstance(detail, dict) and isinstance(detail.get("error_type"), str):
                kind = detail["error_type"]
        return ErrorDetails(ref_id=ref_id, kind=kind)


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
