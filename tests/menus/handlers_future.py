"""Handlers whose annotations are strings (``from __future__ import annotations``)."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from shared.menus import FromContext, Runtime


def plan(
    steps: list[str], limit: Optional[int], mode: Literal["fast", "slow"] = "fast"
) -> dict[str, Any]:
    """Make a plan.

    Longer explanation that is not part of the description.
    """
    return {"steps": steps, "limit": limit, "mode": mode}


def with_injections(
    order_id: str,
    *,
    runtime: Runtime,
    user: Annotated[str, FromContext],
    tenant: Annotated[str, FromContext("org")],
) -> dict[str, Any]:
    """Refund an order for the current user."""
    return {"order_id": order_id, "runtime": runtime, "user": user, "tenant": tenant}


def unresolvable(x: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
    """Its annotation names nothing."""
