"""The answer form of a menu escalation, built from the options encoding it carries.

One radio per option (``call``); a schema option's payload fields become inputs (text,
number, a select for an enum or a bool, a JSON box for lists, objects, maps and ``any``),
and so do a handler option's parameters where the escalation carries them
(``handler_params``: the handler's signature as the worker saw it); a handler option
without them takes its arguments as one JSON box. A raw pick (``{"call": ..., "args":
{...}}``) can always be typed instead; an optional parameter left empty is left out, so
its default applies.
What the form builds is only read into a pick here; the menu engine checks it (the
``menu_checker`` of ``EscalationQueue.resolve``), exactly as for the command line. Only
text that cannot be read at all (not JSON, JSON nested too deep, an int of more digits than
Python converts) is named here, beside its field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import FieldProblem
from shared.menus import MenuSpecInvalid
from shared.menus.schema_json import schema_from_json, type_from_json
from shared.menus.spec import TypeSpec
from shared.replies import EscalationMessage

__all__ = [
    "CALL_FIELD",
    "RAW_FIELD",
    "MenuChoice",
    "MenuInput",
    "menu_answer",
    "menu_choices",
]

CALL_FIELD: Final = "call"
RAW_FIELD: Final = "pick_json"
_INT = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class MenuInput:
    """One payload field; ``widget`` is text, number, select or json."""

    name: str
    field: str
    kind: str
    widget: str
    nullable: bool
    description: str | None
    #: For a select: (form value, label); form values are the JSON of the enum values.
    options: tuple[tuple[str, str], ...] = ()
    required: bool = True
    #: A handler parameter's default, as JSON text (shown; an empty input leaves it to apply).
    default_json: str | None = None


@dataclass(frozen=True)
class MenuChoice:
    name: str
    kind: str
    description: str | None
    inputs: tuple[MenuInput, ...] = ()
    #: A value option's value, shown as JSON; a handler option takes free JSON arguments.
    value_json: str | None = None
    args_name: str | None = None


def menu_choices(message: EscalationMessage) -> list[MenuChoice] | None:
    """The options of the menu, or None when the escalation carries no usable encoding."""
    options = message.context.get("options")
    if not isinstance(options, list) or not options:
        return None
    params = message.context.get("handler_params")
    choices = []
    for i, option in enumerate(options):
        choice = _choice(i, option, params if isinstance(params, Mapping) else {})
        if choice is None:
            return None
        choices.append(choice)
    return choices


def menu_answer(
    choices: list[MenuChoice] | None, form: Mapping[str, str]
) -> tuple[Any, list[FieldProblem]]:
    """The pick the form describes, and the problems that kept it from being read."""
    raw = form.get(RAW_FIELD, "").strip()
    if raw or not choices:
        pick, problem = _json(raw)
        return (None, [FieldProblem(RAW_FIELD, problem)]) if problem else (pick, [])
    call = form.get(CALL_FIELD, "")
    chosen = next((c for c in choices if c.name == call), None)
    if chosen is None:
        # An option the menu does not have still goes to the engine, which names the problem.
        return ({"call": call} if call else None), (
            [] if call else [FieldProblem(CALL_FIELD, "pick an option")]
        )
    problems: list[FieldProblem] = []
    if chosen.args_name is not None:
        args_value, problem = _json(form.get(chosen.args_name, "").strip() or "{}")
        if problem:
            return None, [FieldProblem(chosen.args_name, problem)]
        return {"call": call, "args": args_value}, []
    if not chosen.inputs:
        return {"call": call}, []
    args: dict[str, Any] = {}
    for item in chosen.inputs:
        raw = form.get(item.name, "")
        if raw == "" and not item.required:
            continue
        value, problem = _read(item, raw)
        if problem:
            problems.append(FieldProblem(item.name, problem))
        else:
            args[item.field] = value
    return ({"call": call, "args": args} if not problems else None), problems


def _choice(index: int, option: Any, params: Mapping[str, Any]) -> MenuChoice | None:
    if not isinstance(option, Mapping):
        return None
    name, kind = option.get("name"), option.get("kind")
    description = option.get("description")
    if not isinstance(name, str) or kind not in ("value", "schema", "handler"):
        return None
    description = description if isinstance(description, str) else None
    if kind == "value":
        value = json.dumps(option.get("value"), ensure_ascii=False)
        return MenuChoice(name, kind, description, value_json=value)
    if kind == "handler":
        inputs = _handler_inputs(index, params.get(name))
        if inputs is None:
            return MenuChoice(name, kind, description, args_name=f"m{index}.args")
        return MenuChoice(name, kind, description, inputs=inputs)
    try:
        schema = schema_from_json(option.get("schema"))
    except MenuSpecInvalid:
        return None
    inputs = tuple(
        _input(f"m{index}.f{j}", field.name, field.spec) for j, field in enumerate(schema.fields)
    )
    return MenuChoice(name, kind, description, inputs=inputs)


def _handler_inputs(index: int, described: Any) -> tuple[MenuInput, ...] | None:
    """Inputs for a handler's parameters, or None when they are not (well) described."""
    if not isinstance(described, Mapping) or described.get("accepts_extra"):
        return None
    params = described.get("params")
    if not isinstance(params, list):
        return None
    inputs = []
    for j, param in enumerate(params):
        if not isinstance(param, Mapping) or not isinstance(param.get("name"), str):
            return None
        try:
            spec = type_from_json(param.get("type"))
        except MenuSpecInvalid:
            return None
        item = _input(f"m{index}.f{j}", param["name"], spec)
        default = json.dumps(param["default"]) if "default" in param else None
        inputs.append(
            MenuInput(
                name=item.name,
                field=item.field,
                kind=item.kind,
                widget=item.widget,
                nullable=item.nullable,
                description=item.description,
                options=item.options,
                required=bool(param.get("required", True)),
                default_json=default,
            )
        )
    return tuple(inputs)


def _input(name: str, field: str, spec: TypeSpec) -> MenuInput:
    options: tuple[tuple[str, str], ...] = ()
    if spec.options is not None:
        widget, options = "select", tuple((json.dumps(v), str(v)) for v in spec.options)
    elif spec.kind == "bool":
        widget, options = "select", (("true", "true"), ("false", "false"))
    else:
        widget = {"str": "text", "int": "number", "float": "number"}.get(spec.kind, "json")
    return MenuInput(
        name=name,
        field=field,
        kind=spec.kind,
        widget=widget,
        nullable=spec.nullable,
        description=spec.description,
        options=options,
    )


def _read(item: MenuInput, raw: str) -> tuple[Any, str | None]:
    """The JSON value of one input; a value that does not parse is passed on as text."""
    if raw == "" and item.nullable:
        return None, None
    if item.widget == "select":
        value, problem = _json(raw)
        return (raw, None) if problem else (value, None)
    if item.widget == "json":
        value, problem = _json(raw)
        return (None, problem) if problem else (value, None)
    if item.kind == "int" and _INT.match(raw.strip()):
        try:
            return int(raw), None
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
            return None, "not a number: too many digits"
    if item.kind in ("int", "float"):
        try:
            return float(raw), None
        except ValueError:
            return raw, None
    return raw, None


def _json(raw: str) -> tuple[Any, str | None]:
    """The JSON value of a reviewer's text, or what keeps it from being one."""
    try:
        return json.loads(raw), None
    except RecursionError:  # "[[[[...": json's decoder recurses once a level
        return None, "not JSON: nested too deep to read"
    except ValueError:
        return None, "not JSON"
