"""A reviewer's answer to a menu escalation, parsed and validated by the menu engine itself.

``check_menu_answer(escalation, answer)`` rebuilds the menu from what the escalation carries
(``context["options"]``, the options' JSON encoding, and ``context["handler_params"]``, the
handler options' parameters as the worker saw them, so that no handler code is needed), then
runs the answer through ``shared.menus.parse_pick``: the same parser and validator as a
model's reply. The answer is a pick, ``{"call": "<option>", "args": {...}}`` (the call-key
aliases work), or the bare option name for an option without arguments.

What it resolves to, to be published as the job's ``resolution``:

- a value option: ``{"call": name, "args": {}, "value": <the option's value>}``;
- a schema option: ``{"call": name, "args": {...}, "value": {"decision": name, **args}}``;
- a handler option: ``{"call": name, "args": {...}, "handler": "<registered name>"}``; the
  handler is not run here (a reviewer's machine never executes a job's side effect).

A bad answer is ``ResolutionInvalid`` naming each field: ``answer`` (not a pick),
``answer.call`` (not an option; the message lists the valid ones), ``answer.args.<path>``
(``answer.args.steps[0].action``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.errors import FieldProblem, ResolutionInvalid
from shared.menus import (
    FunctionOption,
    Menu,
    MenuSpecInvalid,
    Option,
    Param,
    PickError,
    SchemaOption,
    ValueOption,
    build_menu,
    menu_from_json,
    parse_pick,
)
from shared.menus.option_types import NO_DEFAULT
from shared.menus.schema_json import type_from_json
from shared.replies import EscalationMessage

__all__ = ["check_menu_answer", "menu_of_escalation"]


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
    except (MenuSpecInvalid, KeyError, TypeError, ValueError) as exc:
        raise ResolutionInvalid(
            [FieldProblem("answer", f"the escalation's menu cannot be rebuilt: {exc}")]
        ) from None


def _field(path: str) -> str:
    if path == "call":
        return "answer.call"
    return f"answer.args.{path}" if path else "answer"


def check_menu_answer(escalation: EscalationMessage, answer: Any) -> dict[str, Any]:
    menu = menu_of_escalation(escalation)
    if isinstance(answer, str) and menu.option(answer) is not None:
        answer = {"call": answer}
    if not isinstance(answer, Mapping):
        raise ResolutionInvalid(
            [FieldProblem("answer", 'a pick: {"call": "<option name>", "args": {...}}')]
        )
    try:
        pick = parse_pick(answer, menu)
    except PickError as error:
        raise ResolutionInvalid(
            [FieldProblem(_field(p.path), f"{p.kind}: {p.message}") for p in error.problems]
        ) from None
    option = pick.option
    resolved: dict[str, Any] = {"call": option.name, "args": pick.args}
    if isinstance(option, ValueOption):
        resolved["value"] = option.value
    elif isinstance(option, SchemaOption):
        resolved["value"] = {"decision": option.name, **pick.args}
    else:
        resolved["handler"] = option.handler
    return resolved
