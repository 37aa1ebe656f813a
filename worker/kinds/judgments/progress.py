"""A batch's cost so far against its estimate, for ``decisions ledger status --batch``.

The estimate is the one stored at submit (or by a dry run) under ``keys.batch_estimate``;
Redis being out of reach, or no estimate stored, is said so rather than shown as 0.
"""

from __future__ import annotations

from typing import Any

import redis
from rich.table import Table

from shared.client import Client
from shared.estimate import Estimate
from shared.settings import Settings
from shared.submit_rejections import submit_rejections
from worker.ledger import LedgerStatus

__all__ = ["add_estimate_rows", "estimate_json", "rejected_at_submit", "stored_estimate"]

_UNREACHABLE = "unreachable"


def stored_estimate(settings: Settings, batch: str) -> Estimate | str | None:
    """The batch's estimate; ``"unreachable"`` if Redis is; None if none is stored."""
    client = Client(settings)
    try:
        return client.stored_estimate(batch)
    except redis.RedisError:
        return _UNREACHABLE
    finally:
        client.close()


def rejected_at_submit(settings: Settings, batch: str) -> int | str:
    """The batch's lines rejected at submit (never in the ledger); ``"unreachable"`` if Redis is."""
    client = Client(settings)
    try:
        return submit_rejections(client.redis, batch)
    except redis.RedisError:
        return _UNREACHABLE
    finally:
        client.close()


def estimate_json(estimate: Estimate | str | None) -> Any:
    if isinstance(estimate, Estimate):
        return {
            "requests": estimate.requests,
            "cost_known_usd": estimate.cost_known_usd,
            "cost_unknown": estimate.cost_unknown,
            "accuracy": estimate.accuracy,
            "by_provider": {
                name: {"requests": p.requests, "cost_usd": p.cost_usd, "basis": p.basis}
                for name, p in estimate.by_provider.items()
            },
        }
    return estimate


def add_estimate_rows(table: Table, figures: LedgerStatus, estimate: Estimate | str | None) -> None:
    table.add_section()
    if not isinstance(estimate, Estimate):
        table.add_row("estimate", "Redis unreachable" if estimate else "none stored")
        return
    table.add_row("requests estimated", str(estimate.requests))
    table.add_row("requests sent so far", str(figures.requests_sent))
    shown = f"${estimate.cost_known_usd:.6f} ±{estimate.accuracy:.0%}"
    if estimate.cost_unknown:
        shown += " + unknown"
    table.add_row("cost estimated", shown)
    table.add_row("cost so far (known)", f"${figures.cost_known_usd:.6f}")
    if estimate.cost_known_usd > 0:
        ratio = figures.cost_known_usd / estimate.cost_known_usd
        table.add_row("so far / estimate", f"{ratio:.0%}")
