"""Handlers for the history scenario (``tests/faults/test_history.py``), registered under
``hist_*`` names: each run appends one JSON line (its job and handler) to the file named by
``HISTORY_RUNS`` with ``O_APPEND``, so runs survive a ``kill -9`` of the worker and can be
counted across every worker process of the run."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

from shared.menus import FromContext
from worker.kinds.menus.handlers import handler

__all__ = ["RUNS_ENV", "read_runs"]

RUNS_ENV = "HISTORY_RUNS"


def _ran(name: str, job: str) -> None:
    path = os.environ.get(RUNS_ENV)
    if not path:
        return
    line = (json.dumps({"handler": name, "job": job}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_runs(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Every recorded run as (job id, handler name)."""
    try:
        with open(path, encoding="utf-8") as runs:
            lines = runs.read().splitlines()
    except FileNotFoundError:
        return []
    return [(d["job"], d["handler"]) for d in map(json.loads, filter(None, lines))]


@handler("hist_refund")
def refund(order_id: str, amount: float, job: Annotated[str, FromContext]) -> dict[str, Any]:
    """Refund an order."""
    _ran("hist_refund", job)
    return {"refunded": order_id, "amount": amount}


@handler("hist_lookup")
def lookup(order_id: str, job: Annotated[str, FromContext]) -> dict[str, Any]:
    """Look an order up."""
    _ran("hist_lookup", job)
    return {"order_id": order_id, "status": "lost in transit"}
