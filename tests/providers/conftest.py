"""Fixtures for the provider tests: ``async def`` tests, provider cases against the faux.

``async def`` tests run on a fresh event loop each (``asyncio.run``), so that no test leaks
a task or a connection into the next.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.providers.support import KEY_VARS


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), timeout=60))
    return True


@pytest.fixture
def canary_key() -> str:
    return f"sk-canary-{uuid.uuid4()}"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch, canary_key: str) -> Iterator[str]:
    """Every provider key variable set to the canary key (restored afterwards)."""
    for var in KEY_VARS:
        monkeypatch.setenv(var, canary_key)
    yield canary_key


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)
