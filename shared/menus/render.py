"""The text menu shown to the model (``render_options``).

Per option, in declaration order::

    - emit_plan(steps: list[{action: str, target: str}], rationale: str)
      Produce a plan.
      steps: list[{action: str, target: str}] (required)
      steps[].action: str (required) - what to do; one of: "run", "stop"
      rationale: str (required) - why
      Call: {"call": "emit_plan", "args": {"steps": [{"action": "run", "target": "<str>"}],
             "rationale": "<str>"}}                      (on one line)

Injected parameters are never shown. One line per model parameter, plus one per nested field
that carries a description or allowed values. The ``Call:`` example uses JSON literals as
placeholders (an optional parameter shows its default when that is JSON). The output is a
pure function of the options (no reprs, ids or sets), byte for byte: it is part of the
request fingerprint in the ledger.
"""

from __future__ import annotations

import json
from typing import Any

from shared.menus.option_types import FunctionOption, Option, Param, SchemaOption
from shared.menus.shapes import example_value, type_str
from shared.menus.spec import TypeSpec

__all__ = ["MENU_HEADER", "call_example", "render_option", "render_options"]

MENU_HEADER = (
    "Options (pick exactly one; reply with one JSON object "
    '{"call": "<option name>", "args": {...}}):'
)


def render_options(options: Any) -> str:
    """The menu text for options in any accepted form (dict, list, normalised, ``Menu``)."""
    from shared.menus.menu import as_menu  # the Menu caches its own rendering

    return as_menu(options).text


def render_normalized(options: tuple[Option, ...]) -> str:
    return "\n\n".join([MENU_HEADER, *(render_option(o) for o in options)]) + "\n"


def render_option(option: Option) -> str:
    lines = [f"- {_signature(option)}"]
    if option.description:
        lines.append(f"  {_one_line(option.description)}")
    if isinstance(option, FunctionOption):
        for param in option.llm_params:
            lines.append(f"  {_param_line(param)}")
            lines.extend(f"  {line}" for line in _nested_lines(param.name, param.spec))
        if option.accepts_extra:
            lines.append("  (other fields are accepted too)")
    elif isinstance(option, SchemaOption):
        for field in option.schema.fields:
            lines.append(f"  {_field_line(field.name, field.spec)}")
            lines.extend(f"  {line}" for line in _nested_lines(field.name, field.spec))
    lines.append(f"  Call: {call_example(option)}")
    return "\n".join(lines)


def call_example(option: Option) -> str:
    args: dict[str, Any] = {}
    if isinstance(option, FunctionOption):
        for param in option.llm_params:
            if not param.required:
                if not _is_json(param.default):
                    continue
                args[param.name] = param.default
            else:
                args[param.name] = example_value(param.spec)
    elif isinstance(option, SchemaOption):
        args = {f.name: example_value(f.spec) for f in option.schema.fields}
    return json.dumps({"call": option.name, "args": args}, ensure_ascii=False)


def _signature(option: Option) -> str:
    parts: list[str] = []
    if isinstance(option, FunctionOption):
        for param in option.llm_params:
            text = f"{param.name}: {type_str(param.spec)}"
            if not param.required:
                text += f" = {_default(param)}"
            parts.append(text)
        if option.accepts_extra:
            parts.append("**extra")
    elif isinstance(option, SchemaOption):
        parts = [f"{f.name}: {type_str(f.spec)}" for f in option.schema.fields]
    return f"{option.name}({', '.join(parts)})"


def _param_line(param: Param) -> str:
    status = "required" if param.required else f"optional, default {_default(param)}"
    return _line(param.name, param.spec, status)


def _field_line(path: str, spec: TypeSpec) -> str:
    return _line(path, spec, "required")


def _line(path: str, spec: TypeSpec, status: str) -> str:
    text = f"{path}: {type_str(spec)} ({status})"
    details = []
    if spec.description:
        details.append(_one_line(spec.description))
    if spec.options:
        details.append(
            "one of: " + ", ".join(json.dumps(o, ensure_ascii=False) for o in spec.options)
        )
    return f"{text} - {'; '.join(details)}" if details else text


def _nested_lines(path: str, spec: TypeSpec) -> list[str]:
    """Lines for nested fields worth a word: those with a description or an enum."""
    lines: list[str] = []
    children: list[tuple[str, TypeSpec]] = []
    if spec.kind == "list" and spec.items is not None:
        children = [(f"{path}[]", spec.items)]
    elif spec.kind == "dict" and spec.values is not None:
        children = [(f"{path}.*", spec.values)]
    elif spec.kind == "object":
        children = [(f"{path}.{f.name}", f.spec) for f in spec.fields]
    for sub_path, sub in children:
        lines.extend(_child(sub_path, sub))
    return lines


def _child(path: str, spec: TypeSpec) -> list[str]:
    own = [_field_line(path, spec)] if spec.description or spec.options else []
    return own + _nested_lines(path, spec)


def _default(param: Param) -> str:
    return (
        json.dumps(param.default, ensure_ascii=False, sort_keys=True)
        if _is_json(param.default)
        else "<default>"
    )


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _one_line(text: str) -> str:
    return " ".join(text.split())
