"""The judgment tests' faux server: in this process, with a Parallel key set (the faux only
checks that there is one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.judgments.support import PARALLEL_TEST_KEY
from worker.process import context
from worker.testing.faux import FauxServer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FauxServer]:
    monkeypatch.setenv("PARALLEL_API_KEY", PARALLEL_TEST_KEY)
    with FauxServer() as running:
        yield running
    context.configure()
