"""A reviewer's answer to a menu escalation, parsed and validated by the menu engine itself.

``check_menu_answer(escalation, answer)`` rebuilds the menu from what the escalation carries
(``shared.menus.escalated.menu_of_escalation``: no handler code is needed), then runs the
answer through ``shared.menus.parse_pick``: the same parser and validator as a
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
from shared.menus import PickError, SchemaOption, ValueOption, parse_pick
from shared.menus.escalated import menu_of_escalation
from shared.replies import EscalationMessage

__all__ = ["check_menu_answer", "menu_of_escalation"]


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
    nul = sorted(_nul_paths(pick.args, ""))
    if nul:
        # Found by an attack: a reviewer's "a\x00b" was published, which a producer storing
        # the answer in PostgreSQL (text, jsonb) cannot keep; job text refuses it as well.
        raise ResolutionInvalid(
            [FieldProblem(_field(path), "holds a NUL character; none is allowed") for path in nul]
        )
    option = pick.option
    resolved: dict[str, Any] = {"call": option.name, "args": pick.args}
    if isinstance(option, ValueOption):
        resolved["value"] = option.value
    elif isinstance(option, SchemaOption):
        resolved["value"] = {"decision": option.name, **pick.args}
    else:
        resolved["handler"] = option.handler
    return resolved


def _nul_paths(value: Any, path: str) -> list[str]:
    """The paths (``steps[0].target``) of the strings and keys in ``value`` holding a NUL.
    An explicit stack: an answer may nest as deep as JSON's reader allowed."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                found.append(where)
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                named = f"{where}.{key}" if where else str(key)
                if "\x00" in str(key):
                    found.append(named)
                else:
                    stack.append((inner, named))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{where}[{index}]") for index, inner in enumerate(item))
    return found
