"""The menu an escalation is about, rebuilt from what it carries (pure).

``menu_of_escalation`` rebuilds the menu from ``context["options"]`` (the options' JSON
encoding) and ``context["handler_params"]`` (the handler options' parameters as the worker
saw them, so that no handler code is needed); ``menu_problem`` says why it cannot be, or
None. Here, in ``shared``, rather than beside the menu answer check in ``worker``: the
reviewers' queue (``shared.escalation_entries``) asks it of every menu escalation it reads,
so that one no answer could be checked against is never handed to a reviewer (found by an
attack: a menu escalation whose options could not be rebuilt was claimed, listed as
readable, and refused by every resolve).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.errors import FieldProblem, ResolutionInvalid
from shared.menus.errors import MenuSpecInvalid
from shared.menus.menu import Menu, build_menu
from shared.menus.menu_json import menu_from_json
from shared.menus.option_types import NO_DEFAULT, FunctionOption, Option, Param
from shared.menus.schema_json import type_from_json
from shared.replies import EscalationMessage

__all__ = ["menu_of_escalation", "menu_problem"]


def _not_run(**kwargs: Any) -> Any:  # pragma: no cover - a reviewer's pick never runs a handler
    raise RuntimeError("a handler is never run to check a reviewer's answer")


def _handler_option(item: Mapping[str, Any], described: Any) -> FunctionOption:
    name, handler = item["name"], item["handler"]
    if not isinstance(described, Mapping) or not isinstance(described.get("params"), list):
        # Nothing known of its parameters: any arguments are taken as they are.
        return FunctionOption(
            name, _not_run, item.get("description"), (), accepts_extra=True, handler=handler
        )
    params = tuple(
        Param(
            p["name"],
            type_from_json(p["type"], path=f"handler_params.{name}.{p['name']}"),
            "llm",
            bool(p.get("required", True)),
            p.get("default", NO_DEFAULT),
        )
        for p in described["params"]
    )
    return FunctionOption(
        name,
        _not_run,
        item.get("description"),
        params,
        accepts_extra=bool(described.get("accepts_extra", False)),
        handler=handler,
    )


def menu_of_escalation(escalation: EscalationMessage) -> Menu:
    """The menu an escalation is about; ``ResolutionInvalid`` if it carries none usable."""
    options = escalation.context.get("options")
    described = escalation.context.get("handler_params") or {}
    if not isinstance(options, list) or not options:
        raise ResolutionInvalid([FieldProblem("answer", "the escalation carries no menu options")])
    if not isinstance(described, Mapping):
        raise ResolutionInvalid(
            [FieldProblem("answer", "the escalation's handler_params are not an object")]
        )
    rebuilt: list[Option] = []
    try:
        for item in options:
            if isinstance(item, Mapping) and item.get("kind") == "handler":
                named = isinstance(item.get("name"), str) and isinstance(item.get("handler"), str)
                if not named:
                    raise MenuSpecInvalid("", "a handler option needs a name and a handler")
                rebuilt.append(_handler_option(item, described.get(item["name"])))
            else:
                rebuilt.extend(menu_from_json([item], {}).options)
        return build_menu(tuple(rebuilt))
    # Anyone's JSON: a description that is an object, parameters of another shape reach the
    # engine as AttributeError too (found by an attack: one such entry stopped every claim).
    except (
        MenuSpecInvalid, KeyError, TypeError, ValueError, AttributeError, RecursionError
    ) as exc:
        raise ResolutionInvalid(
            [FieldProblem("answer", f"the escalation's menu cannot be rebuilt: {exc}")]
        ) from None


def menu_problem(escalation: EscalationMessage) -> str | None:
    """Why no answer could be checked against this menu escalation's menu (None: it can)."""
    try:
        menu_of_escalation(escalation)
    except ResolutionInvalid as exc:
        return "; ".join(p.message for p in exc.problems)
    return None
