"""The chat runtimes a worker knows, built from settings.

Built-in names: ``faux`` (the default unless ``settings.default_runtime`` says otherwise),
``openrouter``, ``openai``, and every host of ``settings.chat_hosts`` under its own name (a
host may not take a built-in name). One ``httpx.AsyncClient`` serves them all. The faux is
there only when asked for, as for the providers (``worker.providers.registry``): at
``settings.faux_url`` through that client, or in process (``faux_transport``, or
``settings.faux_in_process``); otherwise a menu job naming it is refused by its
``runtime.provider`` field.
"""

from __future__ import annotations

from typing import Any

import httpx

from shared.errors import FieldProblem
from shared.settings import Settings
from worker.providers.limiter import Limiter
from worker.providers.named_registry import Entries, NamedRegistry
from worker.providers.outbound import TransportPolicy
from worker.runtimes.chat import ChatConfig, ChatRuntime

__all__ = ["BUILT_IN_RUNTIMES", "FAUX_RUNTIME_ABSENT", "RuntimeRegistry"]

BUILT_IN_RUNTIMES = ("faux", "openrouter", "openai")
FAUX_RUNTIME_ABSENT = (
    "the fake chat runtime, not loaded in this worker; point DECISIONS_FAUX_URL at a "
    "`decisions faux serve` (or set DECISIONS_FAUX_IN_PROCESS=1 in tests), or name a real "
    "runtime (DECISIONS_DEFAULT_RUNTIME for menu jobs that name none)"
)


class RuntimeRegistry(NamedRegistry[ChatRuntime]):
    noun = "runtime"
    hosts_setting = "chat_hosts"
    faux_absent = FAUX_RUNTIME_ABSENT

    @classmethod
    def entries(
        cls, settings: Settings, policy: TransportPolicy, limiter: Limiter | None
    ) -> Entries[ChatRuntime]:
        def runtime(config: ChatConfig, client: httpx.AsyncClient) -> ChatRuntime:
            return ChatRuntime(
                config.bounded(settings), http=client, policy=policy, limiter=limiter
            )

        return Entries(
            faux=lambda client: runtime(ChatConfig.faux(settings), client),
            built_in=lambda http: {
                "openrouter": runtime(ChatConfig.openrouter(settings), http),
                "openai": runtime(ChatConfig.openai(settings), http),
            },
            hosts=settings.chat_hosts,
            host=lambda name, host, http: runtime(ChatConfig.host(name, host), http),
            default_name=settings.default_runtime,
        )

    def check(self, provider: str | None, model: str | None) -> list[FieldProblem]:
        """What is wrong with a menu job's ``runtime`` (pure, no I/O), by field."""
        name = provider or self.default_name
        runtime = self._items.get(name)
        if runtime is None:
            return [FieldProblem("runtime.provider", self.unknown(name))]
        problem = runtime.model_problem(model)
        return [FieldProblem("runtime.model", problem)] if problem else []

    def unbounded(self, provider: str | None) -> str | None:
        """What a menu job's runtime lacks for its calls' cost to have a known maximum
        (``ChatConfig.unbounded``); None when it has one, or is unknown (``check`` says)."""
        runtime = self._items.get(provider or self.default_name)
        return None if runtime is None else runtime.config.unbounded

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
