"""Provider cases for the conformance suite: every provider, pointed at the in-process faux.

Each case builds its provider on an ``httpx.AsyncClient`` whose transport is ``Wire``: it
records every request that reached it and can fail the first ones with a never-sent error
(``ConnectError``) before the faux sees them, so the faux's counts are what was *sent*.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from shared.setting_types import SystemOneHost
from shared.settings import Settings
from worker.providers import (
    DecisionRequest,
    HttpDecisionProvider,
    OpenAIDecisionsProvider,
    ParallelProvider,
    SystemOneConfig,
    SystemOneProvider,
    TransportPolicy,
)
from worker.testing.faux import FauxBehaviour, FauxProvider

BASE = "http://faux.invalid"
KEY_VARS = (
    "OPENROUTER_API_KEY",
    "TYPESAFE_API_KEY",
    "PARALLEL_API_KEY",
    "OPENAI_API_KEY",
    "ACME_API_KEY",
)
#: Quick backoff so retry tests take milliseconds.
FAST = TransportPolicy(timeout_s=5.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)

QUESTIONS: dict[str, dict[str, Any]] = {
    "is_urgent": {
        "type": "noul",
        "instructions": "Does this convey urgency?",
        "criteria": {"true": "Explicitly time-sensitive", "false": "No urgency expressed"},
    },
    "department": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {
            "billing": "Payments, invoicing, refunds",
            "technical": "Bugs, outages, integrations",
            "sales": None,
        },
    },
    "frustration": {
        "type": "score",
        "instructions": "How frustrated is the customer?",
        "criteria": ["Calm", "Frustrated", "Very angry"],
    },
}
STATE = "Help! My payouts have been failing for 3 days."


def questions() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(QUESTIONS)


def deadline(seconds: float = 10.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


class Wire(httpx.AsyncBaseTransport):
    """Records requests; fails the first ``connect_failures`` with ``ConnectError``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, connect_failures: int = 0) -> None:
        self.inner = inner
        self.connect_failures = connect_failures
        self.requests: list[httpx.Request] = []
        self.refused = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        if self.connect_failures > 0:
            self.connect_failures -= 1
            self.refused += 1
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        self.requests.append(request)
        return await self.inner.handle_async_request(request)


@dataclass(frozen=True)
class Case:
    name: str
    #: The key variable (``None``: the faux, which needs none).
    key_env: str | None
    #: The path the request must go to.
    path: str
    build: Callable[[httpx.AsyncClient, TransportPolicy], HttpDecisionProvider]
    #: The model a request pins (``None``: the provider's default).
    model: str | None
    min_choice_options: int
    #: "reported", "estimate" or None: the basis of an answered request's cost.
    answered_basis: str | None
    #: (usd is not None, basis) for a request whose outcome is unknown.
    unknown_basis: str | None
    #: How the key travels: header name and whether it is ``Bearer``.
    key_header: str = "authorization"
    bearer: bool = True
    takes_images: bool = False
    #: The decision id is expected on an answered request.
    has_decision_id: bool = True

    def provider(
        self, http: httpx.AsyncClient, policy: TransportPolicy = FAST
    ) -> HttpDecisionProvider:
        return self.build(http, policy)

    def request(self, **changes: Any) -> DecisionRequest:
        fields: dict[str, Any] = {
            "state": STATE,
            "questions": questions(),
            "model": self.model,
            "call_key": "job-1/decide",
        }
        fields.update(changes)
        return DecisionRequest(**fields)


def _settings(**values: Any) -> Settings:
    return Settings(
        openrouter_base_url=f"{BASE}/api",
        typesafe_base_url=BASE,
        parallel_base_url=BASE,
        openai_base_url=BASE,
        faux_url=None,
        **values,
    )


def _system_one(
    config: SystemOneConfig,
) -> Callable[[httpx.AsyncClient, TransportPolicy], HttpDecisionProvider]:
    return lambda http, policy: SystemOneProvider(config, http=http, policy=policy)


CASES: tuple[Case, ...] = (
    Case(
        name="faux",
        key_env=None,
        path="/api/v1/systemone",
        build=_system_one(SystemOneConfig.faux(_settings())),
        model=None,
        min_choice_options=1,
        answered_basis="reported",
        unknown_basis=None,
        takes_images=True,
    ),
    Case(
        name="openrouter",
        key_env="OPENROUTER_API_KEY",
        path="/api/v1/systemone",
        build=_system_one(SystemOneConfig.openrouter(_settings())),
        model="liquid/d1",
        min_choice_options=1,
        answered_basis="reported",
        unknown_basis=None,
        takes_images=True,
    ),
    Case(
        name="typesafe",
        key_env="TYPESAFE_API_KEY",
        path="/v1/systemone",
        build=_system_one(SystemOneConfig.typesafe(_settings())),
        model=None,
        min_choice_options=1,
        answered_basis="estimate",
        unknown_basis="estimate",
    ),
    Case(
        name="acme",
        key_env="ACME_API_KEY",
        path="/v1/systemone",
        build=_system_one(
            SystemOneConfig.host(
                "acme",
                SystemOneHost(base_url=BASE, key_env="ACME_API_KEY", default_model="jev-latest"),
            )
        ),
        model=None,
        min_choice_options=1,
        answered_basis=None,
        unknown_basis=None,
        has_decision_id=False,
    ),
    Case(
        name="parallel",
        key_env="PARALLEL_API_KEY",
        path="/v1/decisions",
        build=lambda http, policy: ParallelProvider(http=http, base_url=BASE, policy=policy),
        model=None,
        min_choice_options=2,
        answered_basis="estimate",
        unknown_basis="estimate",
        key_header="x-api-key",
        bearer=False,
    ),
    Case(
        name="openai",
        key_env="OPENAI_API_KEY",
        path="/v1/decisions",
        build=lambda http, policy: OpenAIDecisionsProvider(http=http, base_url=BASE, policy=policy),
        model=None,
        min_choice_options=2,
        answered_basis="estimate",
        unknown_basis="estimate",
    ),
)
CASE_IDS = [case.name for case in CASES]


@dataclass
class Rig:
    """One case wired to a fresh faux."""

    case: Case
    faux: FauxProvider
    wire: Wire
    http: httpx.AsyncClient
    provider: HttpDecisionProvider

    @classmethod
    def build(
        cls,
        case: Case,
        behaviour: FauxBehaviour | None = None,
        *,
        connect_failures: int = 0,
        policy: TransportPolicy = FAST,
    ) -> Rig:
        faux = FauxProvider(behaviour)
        wire = Wire(faux.transport(), connect_failures=connect_failures)
        http = httpx.AsyncClient(transport=wire)
        return cls(case, faux, wire, http, case.provider(http, policy))

    async def aclose(self) -> None:
        await self.http.aclose()
