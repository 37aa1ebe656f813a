"""Handlers for ``tickets_menu.jsonl``: what a support desk's menu options do.

Run the batch with them registered::

    DECISIONS_HANDLERS=examples.menus.handlers decisions run examples/menus/tickets_menu.jsonl

A menu job names a handler by its registered name (``{"kind": "handler", "name": "refund",
"handler": "issue_refund"}``); the model fills the parameters the signature shows it, and
``customer`` comes from the job's ``context``, never from the model. These handlers only
compute and record; a real one would call the payments or ticketing system, and the worker
runs it at most once per job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from shared.menus import FromContext
from worker.kinds.menus.handlers import handler

__all__ = ["escalate_to_human", "issue_refund", "lookup_order"]

#: Made-up orders for ``lookup_order``.
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"status": "delivered", "amount": 42.5, "days_ago": 3},
    "A-1002": {"status": "lost in transit", "amount": 19.99, "days_ago": 21},
    "A-1003": {"status": "charged twice", "amount": 120.0, "days_ago": 1},
}


@handler("issue_refund")
def issue_refund(
    order_id: str,
    amount: float,
    reason: str,
    customer: Annotated[str, FromContext],
) -> dict[str, Any]:
    """Refund an order: the money goes back to the customer.

    Args:
        order_id: the order to refund, e.g. A-1001
        amount: how much to refund, in USD
        reason: one sentence for the customer
    """
    return {"status": "refunded", "order_id": order_id, "amount": amount, "customer": customer}


@handler("escalate_to_human")
def escalate_to_human(
    team: Literal["billing", "technical", "security"], summary: str
) -> dict[str, Any]:
    """Hand the ticket to a person on a team, with a summary of what is needed."""
    return {"status": "escalated", "team": team, "summary": summary}


@handler("lookup_order")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up: its status, amount and how many days ago it was placed."""
    return ORDERS.get(order_id, {"status": "unknown order"})
