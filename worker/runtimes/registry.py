"""The chat runtimes a worker knows, built from settings.

Built-in names: ``faux`` (the default unless ``settings.default_runtime`` says otherwise),
``openrouter``, ``openai``, and every host of ``settings.chat_hosts`` under its own name (a
host may not take a built-in name). One ``httpx.AsyncClient`` serves them all; the faux is
reached at ``settings.faux_url`` through it when set, else in process.
"""

from __future__ import annotations

from typing import Any

import httpx

from shared.errors import ConfigurationError, FieldProblem
from shared.settings import Settings
from worker.named_registry import NamedRegistry
from worker.providers.limiter import Limiter
from worker.providers.transport import TransportPolicy
from worker.runtimes.chat import ChatConfig, ChatRuntime

__all__ = ["BUILT_IN_RUNTIMES", "RuntimeRegistry"]

BUILT_IN_RUNTIMES = ("faux", "openrouter", "openai")


def _faux_transport(settings: Settings) -> httpx.AsyncBaseTransport:
    # Imported only when the in-process faux is wanted: a production worker never loads it.
    from worker.faux import FauxBehaviour, FauxProvider

    return FauxProvider(FauxBehaviour(latency_ms=settings.faux_latency_ms)).transport()


class RuntimeRegistry(NamedRegistry[ChatRuntime]):
    noun = "runtime"

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        http: httpx.AsyncClient | None = None,
        faux_transport: httpx.AsyncBaseTransport | None = None,
        limiter: Limiter | None = None,
    ) -> RuntimeRegistry:
        owned: list[httpx.AsyncClient] = []
        if http is None:
            http = httpx.AsyncClient()
            owned.append(http)
        policy = TransportPolicy(
            timeout_s=settings.provider_timeout_s, max_attempts=settings.max_transport_attempts
        )
        if settings.faux_url and faux_transport is None:
            faux_http = http
        else:
            faux_http = httpx.AsyncClient(transport=faux_transport or _faux_transport(settings))
            owned.append(faux_http)

        def runtime(config: ChatConfig, client: httpx.AsyncClient) -> ChatRuntime:
            return ChatRuntime(config, http=client, policy=policy, limiter=limiter)

        runtimes = {
            "faux": runtime(ChatConfig.faux(settings), faux_http),
            "openrouter": runtime(ChatConfig.openrouter(settings), http),
            "openai": runtime(ChatConfig.openai(settings), http),
        }
        for name, host in settings.chat_hosts.items():
            if name in runtimes:
                raise ConfigurationError(
                    f"chat_hosts: {name!r} is a built-in runtime; choose another name"
                )
            runtimes[name] = runtime(ChatConfig.host(name, host), http)
        return cls(runtimes, default_name=settings.default_runtime, owned_clients=tuple(owned))

    def check(self, provider: str | None, model: str | None) -> list[FieldProblem]:
        """What is wrong with a menu job's ``runtime`` (pure, no I/O), by field."""
        name = provider or self.default_name
        runtime = self._items.get(name)
        if runtime is None:
            return [
                FieldProblem(
                    "runtime.provider",
                    f"unknown runtime {name!r}; known: {', '.join(self.names())}",
                )
            ]
        problem = runtime.model_problem(model)
        return [FieldProblem("runtime.model", problem)] if problem else []

    def describe(self) -> list[dict[str, Any]]:
        """One row per runtime: never a key, only the variable it is read from."""
        return [
            {
                "name": name,
                "default": name == self.default_name,
                "url": rt.config.url,
                "default_model": rt.default_model(),
                "models": list(rt.models()) or ["(any)"],
                "key_env": rt.key_env,
            }
            for name, rt in self._items.items()
        ]
