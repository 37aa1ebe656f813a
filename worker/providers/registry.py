"""The providers a worker (or a producer's submit-time check) knows, built from settings.

Built-in names: ``faux`` (the default unless ``settings.default_provider`` says otherwise),
``openrouter``, ``typesafe``, ``parallel``, ``openai``, and every host of
``settings.systemone_hosts`` under its own name (a host may not take a built-in name).

One ``httpx.AsyncClient`` serves every provider of the process (pass it as ``http``; when
none is passed the registry makes one and closes it in ``aclose``). The faux is reached at
``settings.faux_url`` through that client when it is set, else in process through
``faux_transport`` or, failing that, ``worker.faux.FauxProvider().transport()``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import httpx

from shared.errors import ConfigurationError, FieldProblem
from shared.settings import Settings
from worker.named_registry import NamedRegistry
from worker.providers.base import DecisionProvider
from worker.providers.limiter import Limiter
from worker.providers.openai import OpenAIDecisionsProvider
from worker.providers.parallel import ParallelProvider
from worker.providers.systemone import SystemOneConfig, SystemOneProvider
from worker.providers.transport import TransportPolicy

__all__ = ["BUILT_IN", "ProviderRegistry"]

BUILT_IN = ("faux", "openrouter", "typesafe", "parallel", "openai")


def _faux_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    # Imported only when the in-process faux is wanted: a production worker never loads it.
    from worker.faux import FauxBehaviour, FauxProvider

    behaviour = FauxBehaviour(latency_ms=settings.faux_latency_ms)
    return FauxProvider(behaviour).transport()


class ProviderRegistry(NamedRegistry[DecisionProvider]):
    noun = "provider"

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        http: httpx.AsyncClient | None = None,
        faux_transport: httpx.AsyncBaseTransport | None = None,
        limiter: Limiter | None = None,
    ) -> ProviderRegistry:
        owned: list[httpx.AsyncClient] = []
        if http is None:
            http = httpx.AsyncClient()
            owned.append(http)
        policy = TransportPolicy(
            timeout_s=settings.provider_timeout_s, max_attempts=settings.max_transport_attempts
        )
        if settings.faux_url:
            faux_http = http
        else:
            faux_http = httpx.AsyncClient(transport=faux_transport or _faux_transport(settings))
            owned.append(faux_http)

        def system_one(config: SystemOneConfig, client: httpx.AsyncClient) -> SystemOneProvider:
            return SystemOneProvider(config, http=client, policy=policy, limiter=limiter)

        providers: dict[str, DecisionProvider] = {
            "faux": system_one(SystemOneConfig.faux(settings), faux_http),
            "openrouter": system_one(SystemOneConfig.openrouter(settings), http),
            "typesafe": system_one(SystemOneConfig.typesafe(settings), http),
            "parallel": ParallelProvider.from_settings(settings, http=http, limiter=limiter),
            "openai": OpenAIDecisionsProvider.from_settings(settings, http=http, limiter=limiter),
        }
        for name, host in settings.systemone_hosts.items():
            if name in providers:
                raise ConfigurationError(
                    f"systemone_hosts: {name!r} is a built-in provider; choose another name"
                )
            providers[name] = system_one(SystemOneConfig.host(name, host), http)
        return cls(providers, default_name=settings.default_provider, owned_clients=tuple(owned))

    def check(self, provider_name: str | None, model: str | None) -> list[FieldProblem]:
        """What is wrong with asking ``provider_name`` for ``model`` (pure, no I/O).

        Used at submit time and by the worker before anything is sent.
        """
        name = provider_name or self.default_name
        provider = self._items.get(name)
        if provider is None:
            return [
                FieldProblem(
                    "provider", f"unknown provider {name!r}; known: {', '.join(self.names())}"
                )
            ]
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
                    "experimental_inputs": list(getattr(provider, "experimental_inputs", ()) or ()),
                }
            )
        return rows
