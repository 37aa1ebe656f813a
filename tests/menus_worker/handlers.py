"""Handlers for the menu-worker tests, registered under ``t_*`` names, counting their runs.

Every run is appended to ``RUNS`` and, when ``MENUS_TEST_RUNS`` names a file, to that file
(one JSON line each, ``O_APPEND``), so a test counts executions in a real worker process too.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Annotated, Any, Literal

from shared.menus import FromContext, Runtime
from worker.kinds.menus.handlers import handler

__all__ = ["RUNS", "runs_of"]

RUNS: list[tuple[str, dict[str, Any]]] = []
_lock = threading.Lock()


def _ran(name: str, **args: Any) -> None:
    with _lock:
        RUNS.append((name, args))
    path = os.environ.get("MENUS_TEST_RUNS")
    if path:
        line = (json.dumps({"handler": name, "args": args}, default=str) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def runs_of(name: str) -> list[dict[str, Any]]:
    with _lock:
        return [args for n, args in RUNS if n == name]


@handler("t_refund")
def refund(order_id: str, amount: float, customer: Annotated[str, FromContext]) -> dict[str, Any]:
    """Refund an order."""
    _ran("t_refund", order_id=order_id, amount=amount, customer=customer)
    return {"refunded": order_id, "amount": amount, "customer": customer}


@handler("t_escalate")
def escalate(team: Literal["billing", "technical"], summary: str) -> dict[str, Any]:
    """Hand the ticket to a person."""
    _ran("t_escalate", team=team, summary=summary)
    return {"escalated": team}


@handler("t_explode")
def explode(reason: str) -> None:
    """Call the payments system, which is down."""
    _ran("t_explode", reason=reason)
    raise RuntimeError(f"payments system is down ({reason})")


@handler("t_lookup")
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    _ran("t_lookup", order_id=order_id)
    return {"order_id": order_id, "status": "lost in transit"}


@handler("t_ask")
def ask(question: str, runtime: Runtime) -> str | None:
    """Ask the model a follow-up question and return its answer."""
    _ran("t_ask", question=question)
    return runtime.exec([{"role": "user", "content": question}]).text


@handler("t_extra")
def extra(note: str, **fields: Any) -> dict[str, Any]:
    """Take a note and whatever else the model sends."""
    _ran("t_extra", note=note, **fields)
    return {"note": note, **fields}


@handler
def t_sentiment(message: str, strict: bool = False) -> dict[str, Any]:
    """Analyse the sentiment of a message."""
    _ran("t_sentiment", message=message, strict=strict)
    return {"sentiment": "negative" if "!" in message else "neutral", "strict": strict}


@handler()
def t_fallback() -> str:
    """Send the fallback reply."""
    _ran("t_fallback")
    return "FALLBACK_SENT"


@handler("t_unwritable")
def unwritable(note: str) -> dict[str, Any]:
    """Answer with text no JSON writer can encode (a lone surrogate)."""
    _ran("t_unwritable", note=note)
    return {"note": note + "\udfff"}
