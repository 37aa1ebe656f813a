"""Fixtures for the faux provider's tests: a sample request, in-process and real clients.

The real server is the pytest plugin's ``faux_server`` (``worker.testing.plugin``), so that
every run of these tests exercises the fixture users' tests get.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.canonical import canonical_bytes
from worker.testing import FauxHandle
from worker.testing.faux import FauxProvider, FauxServer

AUTH = {"Authorization": "Bearer test-key"}


def system_one_body(**overrides: Any) -> dict[str, Any]:
    """The wire facts' own example request."""
    body: dict[str, Any] = {
        "model": "jev-latest",
        "state": "Help! My payouts have been failing for 3 days.",
        "questions": {
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
        },
    }
    body.update(overrides)
    return body


def openai_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-6-luna",
        "input": "Help! My payouts have been failing for 3 days.",
        "questions": [
            {"type": "predicate", "name": "is_urgent", "instructions": "Does this convey urgency?"},
            {
                "type": "choice",
                "name": "department",
                "instructions": "Which team should handle this?",
                "choices": [
                    {"value": "billing", "description": "Payments"},
                    {"value": "technical"},
                    {"value": True, "description": "a boolean value"},
                ],
            },
            {
                "type": "score",
                "name": "frustration",
                "instructions": "How frustrated is the customer?",
                "levels": [{"label": "Calm"}, {"label": "Frustrated"}, {"label": "Very angry"}],
            },
        ],
    }
    body.update(overrides)
    return body


def post(
    client: httpx.Client,
    path: str,
    body: Any,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """POST ``body`` as providers send it: canonical bytes."""
    raw = body if isinstance(body, bytes) else canonical_bytes(body)
    return client.post(path, content=raw, headers={**AUTH, **(headers or {})}, **kwargs)


@pytest.fixture
def provider() -> FauxProvider:
    return FauxProvider()


@pytest.fixture
def client(provider: FauxProvider) -> Iterator[httpx.Client]:
    with httpx.Client(transport=provider.transport(), base_url="http://faux.test") as c:
        yield c


@pytest.fixture
def server(faux_server: FauxHandle) -> FauxServer:
    return faux_server.server


@pytest.fixture(params=["in_process", "server"])
def either(request: pytest.FixtureRequest) -> Iterator[tuple[FauxProvider, httpx.Client]]:
    """The same provider behind the in-process transport, then behind the real server."""
    if request.param == "in_process":
        provider = FauxProvider()
        with httpx.Client(transport=provider.transport(), base_url="http://faux.test") as c:
            yield provider, c
    else:
        running: FauxHandle = request.getfixturevalue("faux_server")
        with httpx.Client(base_url=running.url, timeout=10) as c:
            yield running.provider, c
