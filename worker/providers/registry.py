"""The providers a worker (or a producer's submit-time check) knows, built from settings.

Built-in names: ``faux`` (the default unless ``settings.default_provider`` says otherwise),
``openrouter``, ``typesafe``, ``parallel``, ``openai``, and every host of
``settings.systemone_hosts`` under its own name (a host may not take a built-in name).

One ``httpx.AsyncClient`` serves every provider of the process (pass it as ``http``; when
none is passed the registry makes one and closes it in ``aclose``). The faux is there only
when asked for: at ``settings.faux_url`` through that client,
or in process through ``faux_transport`` or, with ``settings.faux_in_process``,
the testing part's faux (``worker.fakes.faux_transport``). Otherwise ``faux`` is absent and
``worker.testing`` is never imported: a job naming it, or relying on it as the default, is
refused by its ``provider`` field, saying which setting brings the faux.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import httpx

from shared.errors import FieldProblem
from shared.settings import Settings
from worker.providers.base import DecisionProvider, PreparedRequest
from worker.providers.limiter import Limiter
from worker.providers.named_registry import Entries, NamedRegistry
from worker.providers.openai import OpenAIDecisionsProvider
from worker.providers.outbound import TransportPolicy
from worker.providers.parallel import ParallelProvider
from worker.providers.systemone import SystemOneConfig, SystemOneProvider

__all__ = ["BUILT_IN", "FAUX_ABSENT", "ProviderRegistry"]

BUILT_IN = ("faux", "openrouter", "typesafe", "parallel", "openai")
#: Why a worker has no ``faux``, and how to get one (the job's field names the provider).
FAUX_ABSENT = (
    "the fake provider, not loaded in this worker; point DECISIONS_FAUX_URL at a "
    "`decisions faux serve` (or set DECISIONS_FAUX_IN_PROCESS=1 in tests), or name a real "
    "provider (DECISIONS_DEFAULT_PROVIDER for jobs that name none)"
)


class ProviderRegistry(NamedRegistry[DecisionProvider]):
    noun = "provider"
    hosts_setting = "systemone_hosts"
    faux_absent = FAUX_ABSENT

    def __init__(
        self,
        items: Mapping[str, DecisionProvider],
        *,
        default_name: str,
        owned_clients: tuple[httpx.AsyncClient, ...] = (),
        absent: Mapping[str, str] | None = None,
        max_prices: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(
            items, default_name=default_name, owned_clients=owned_clients, absent=absent
        )
        #: ``settings.max_price_per_mtok_usd``: the most each provider may charge a million
        #: tokens (this registry's own copy).
        self.max_prices: dict[str, float] = dict(max_prices or {})

    @classmethod
    def entries(
        cls, settings: Settings, policy: TransportPolicy, limiter: Limiter | None
    ) -> Entries[DecisionProvider]:
        def system_one(config: SystemOneConfig, client: httpx.AsyncClient) -> DecisionProvider:
            return SystemOneProvider(config, http=client, policy=policy, limiter=limiter)

        def built_in(http: httpx.AsyncClient) -> dict[str, DecisionProvider]:
            return {
                "openrouter": system_one(SystemOneConfig.openrouter(settings), http),
                "typesafe": system_one(SystemOneConfig.typesafe(settings), http),
                "parallel": ParallelProvider.from_settings(settings, http=http, limiter=limiter),
                "openai": OpenAIDecisionsProvider.from_settings(
                    settings, http=http, limiter=limiter
                ),
            }

        return Entries(
            faux=lambda client: system_one(SystemOneConfig.faux(settings), client),
            built_in=built_in,
            hosts=settings.systemone_hosts,
            host=lambda name, host, http: system_one(SystemOneConfig.host(name, host), http),
            default_name=settings.default_provider,
            extra={"max_prices": settings.max_price_per_mtok_usd},
        )

    def worst_cost(self, provider: DecisionProvider, prepared: PreparedRequest) -> float | None:
        """The most ``prepared`` can cost at ``provider`` (reserved against a budget before it
        is sent); None: no known maximum, so it cannot run under a budget."""
        rule = getattr(provider, "worst_cost", None)
        if rule is None:
            return None
        worst = rule(prepared, self.max_prices.get(provider.name))
        return None if worst is None else float(worst)

    def check(self, provider_name: str | None, model: str | None) -> list[FieldProblem]:
        """What is wrong with asking ``provider_name`` for ``model`` (pure, no I/O).

        Used at submit time and by the worker before anything is sent.
        """
        name = provider_name or self.default_name
        provider = self._items.get(name)
        if provider is None:
            return [FieldProblem("provider", self.unknown(name))]
        chosen = model or provider.default_model()
        if chosen is None:
            return [
                FieldProblem(
                    "model", f"provider {name!r} needs a model and has no default; name one"
                )
            ]
        served = provider.models()
        if served and chosen not in served:
            return [
                FieldProblem(
                    "model",
                    f"provider {name!r} does not serve {chosen!r}; it serves {', '.join(served)}",
                )
            ]
        return []

    def describe(self) -> list[dict[str, Any]]:
        """One row per provider for ``decisions providers``: never a key, only whether its
        variable is set."""
        rows = []
        for name, provider in self._items.items():
            key_env = getattr(provider, "key_env", None)
            key_set = getattr(provider, "key_is_set", None)
            rows.append(
                {
                    "name": name,
                    "default": name == self.default_name,
                    "models": list(provider.models()) or ["(any)"],
                    "default_model": provider.default_model(),
                    "replay": provider.replay,
                    "limits": asdict(provider.limits),
                    "key_env": key_env,
                    "key_set": bool(key_set) if key_set is not None else None,
                    "key_problem": getattr(provider, "key_problem", None),
                    "experimental_inputs": list(getattr(provider, "experimental_inputs", ()) or ()),
                }
            )
        return rows
