"""Fixtures for the menu-worker tests: ``async def`` tests on a fresh loop each, and a
harness (SQLite ledger, in-process faux, memory sink) around a real ``Runner``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.menus_worker import handlers
from tests.menus_worker.support import Harness


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), timeout=60))
    return True


@pytest.fixture(autouse=True)
def _fresh_runs() -> Iterator[None]:
    handlers.RUNS.clear()
    yield
    handlers.RUNS.clear()


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.create(tmp_path)
