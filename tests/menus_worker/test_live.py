"""A live menu pick on OpenRouter's chat completions (a fraction of a cent a run).

Runs only with ``OPENROUTER_API_KEY`` set and is skipped otherwise, naming the variable.
``OPENROUTER_LIVE_CHAT_MODEL`` picks the model (default ``openai/gpt-4o-mini``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from shared.menus import DecisionSession
from shared.settings import Settings
from worker.runtimes import RuntimeRegistry

pytestmark = pytest.mark.live


async def test_live_openrouter_pick() -> None:
    if not os.environ.get("OPENROUTER_API_KEY", "").strip():
        pytest.skip("OPENROUTER_API_KEY is not set: the live chat test is skipped")
    model = os.environ.get("OPENROUTER_LIVE_CHAT_MODEL", "openai/gpt-4o-mini")
    session = DecisionSession.for_make(
        "A customer writes: 'Thanks, all sorted now!'. Pick exactly one option.",
        {
            "close": ("CLOSED", "Nothing more to do."),
            "escalate": ("ESCALATED", "A person must help."),
        },
    )
    step = session.start()
    async with httpx.AsyncClient() as http:
        registry = RuntimeRegistry.from_settings(Settings(), http=http)
        runtime = registry.get("openrouter")
        prepared = runtime.prepare(step.messages, model=model, call_key="live/pick.0")
        result = await runtime.send(prepared, datetime.now(UTC) + timedelta(seconds=60))
        await registry.aclose()
    assert result.receipt.status == "answered" and result.receipt.decision_id
    assert result.receipt.cost_basis in {"reported", None}
    decided = session.on_reply(result.reply)
    assert getattr(decided, "pick", None) is not None
