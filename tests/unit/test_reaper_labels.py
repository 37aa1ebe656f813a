"""The reaper's label round survives a ledger outage: the worker's context is built on first
use, and building it reads the ledger's schema; raising from the reaper ended the worker (a
PostgreSQL outage of 3 s stopped a fleet in tests/faults/test_servers_restart.py)."""

from __future__ import annotations

import pytest

from worker.ledger.errors import LedgerUnavailable
from worker.process import context
from worker.recovery import reaper


def test_store_labels_waits_for_the_ledger_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable() -> None:
        raise LedgerUnavailable("ledger unavailable at postgresql://db: connection refused")

    monkeypatch.setattr(context, "current", unreachable)
    assert reaper.store_labels() == 0
