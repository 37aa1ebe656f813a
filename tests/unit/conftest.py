"""Fixtures shared by this folder's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import postgres_schema


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A ledger URL of the test's own on each backend: a SQLite file, a PostgreSQL schema
    (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    with postgres_schema("unit") as url:
        yield url
