"""Recording through the real providers and transport against a faux standing in for the
real host, and a hostile faux that echoes every request header back."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from shared.settings import Settings, get_settings
from worker.providers import DecisionRequest, ProviderRegistry, ProviderResult
from worker.testing.faux import FauxProvider, FauxResponse
from worker.testing.faux.outcome import Outcome
from worker.testing.faux.reading import Admission
from worker.testing.handles import provider_urls

MODEL = "typesafe/jev-1.14"
STATE = {"body": "Help! My payouts have been failing for 3 days."}
QUESTIONS: dict[str, dict[str, Any]] = {
    "is_urgent": {"type": "noul", "instructions": "Does this convey urgency?"},
    "department": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "Payments, refunds", "technical": "Bugs, outages"},
    },
}
#: What each provider needs to be asked (OpenRouter wants a model; the others have defaults).
MODELS: dict[str, str | None] = {
    "openrouter": MODEL, "typesafe": None, "parallel": None, "openai": None,
}
KEY_VARS = {
    "openrouter": "OPENROUTER_API_KEY",
    "typesafe": "TYPESAFE_API_KEY",
    "parallel": "PARALLEL_API_KEY",
    "openai": "OPENAI_API_KEY",
}


def questions() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(QUESTIONS)


def request(
    *,
    state: Any = None,
    model: str | None = MODEL,
    qs: dict[str, dict[str, Any]] | None = None,
    call_key: str = "job-1/decide",
) -> DecisionRequest:
    return DecisionRequest(
        state=STATE if state is None else state,
        questions=questions() if qs is None else qs,
        model=model,
        call_key=call_key,
    )


def deadline(seconds: float = 10.0) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def settings_at(url: str, **extra: Any) -> Settings:
    """Every built-in provider's base URL at ``url`` (the faux standing in as the real host)."""
    return Settings(**provider_urls(url), **extra)


async def _decide(
    settings: Settings,
    provider: str,
    req: DecisionRequest,
    transport: httpx.AsyncBaseTransport | None,
) -> ProviderResult:
    async with httpx.AsyncClient(transport=transport) as http:
        registry = ProviderRegistry.from_settings(settings, http=http)
        try:
            return await registry.get(provider).decide(req, deadline())
        finally:
            await registry.aclose()


def decide(
    settings: Settings,
    provider: str,
    req: DecisionRequest,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProviderResult:
    """One decision through the real provider and transport (raises DecisionProviderError)."""
    return asyncio.run(_decide(settings, provider, req, transport))


def recordings(directory: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def use_record_dir(monkeypatch: Any, directory: Path, **secrets: list[str]) -> None:
    """``DECISIONS_RECORD_DIR`` (and secret settings) as ``decisions record`` sets them."""
    monkeypatch.setenv("DECISIONS_RECORD_DIR", str(directory))
    for name, values in secrets.items():
        monkeypatch.setenv(f"DECISIONS_{name.upper()}", json.dumps(values))
    get_settings.cache_clear()


class EchoingFaux(FauxProvider):
    """A hostile host: every request header comes back as an ``x-echo-*`` header, in a
    cookie, in the JSON body (``echo``, as a value and as a key) and in a session header."""

    async def handle_async(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        admission: Admission | None = None,
    ) -> Outcome:
        outcome = await super().handle_async(method, path, query, headers, body, admission)
        if not isinstance(outcome, FauxResponse) or admission is None:
            return outcome
        lowered = {k.lower(): v for k, v in headers.items()}
        auth = lowered.get("authorization") or lowered.get("x-api-key") or ""
        echoed = dict(outcome.headers)
        echoed.update({f"x-echo-{name}": value for name, value in lowered.items()})
        echoed["set-cookie"] = f"session={auth}"
        echoed["x-session-token"] = f"operator-secret {auth}"
        payload = json.loads(outcome.body)
        payload["echo"] = {"headers": lowered, auth or "no-auth": "as a key, too"}
        if outcome.status >= 400:
            payload["message"] = f"bad key {auth}"
        return FauxResponse(outcome.status, echoed, json.dumps(payload).encode())
