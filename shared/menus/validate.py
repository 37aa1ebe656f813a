"""Recursive validation of a model's JSON against a ``TypeSpec``.

Returns the cleaned value: fields outside an object's declaration are dropped at every
level, ints on a float field become floats. ``bool`` is never an ``int`` (nor a float), and
JSON ``null`` fits only a nullable field or ``any``. Problems are collected, not raised, so
that one retry can tell the model everything that was wrong at once; each names its path
(``steps[0].action``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from shared.menus.errors import Problem
from shared.menus.shapes import type_str
from shared.menus.spec import TypeSpec

__all__ = ["MAX_PROBLEMS", "json_equal", "json_type_name", "validate_value"]

#: Collected problems stop here; a reply that wrong needs no longer list to be retried.
MAX_PROBLEMS = 20


def validate_value(value: Any, spec: TypeSpec, path: str, problems: list[Problem]) -> Any:
    """Check ``value`` against ``spec``; append problems; return the cleaned value."""
    if len(problems) >= MAX_PROBLEMS:
        return value
    if value is None:
        if spec.nullable or spec.kind == "any":
            return None
        return _mismatch(value, spec, path, problems)
    kind = spec.kind
    if kind == "any":
        cleaned = value
    elif kind == "str":
        if not isinstance(value, str):
            return _mismatch(value, spec, path, problems)
        cleaned = value
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            return _mismatch(value, spec, path, problems)
        cleaned = value
    elif kind == "float":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return _mismatch(value, spec, path, problems)
        cleaned = float(value)
        if not math.isfinite(cleaned):
            return _mismatch(value, spec, path, problems)
    elif kind == "bool":
        if not isinstance(value, bool):
            return _mismatch(value, spec, path, problems)
        cleaned = value
    elif kind == "list":
        if not isinstance(value, list):
            return _mismatch(value, spec, path, problems)
        assert spec.items is not None
        return [
            validate_value(v, spec.items, f"{path}[{i}]", problems) for i, v in enumerate(value)
        ]
    elif kind == "dict":
        if not isinstance(value, dict):
            return _mismatch(value, spec, path, problems)
        assert spec.values is not None
        return {
            k: validate_value(v, spec.values, _join(path, k), problems) for k, v in value.items()
        }
    else:  # object
        if not isinstance(value, dict):
            return _mismatch(value, spec, path, problems)
        return validate_fields(value, spec, path, problems)
    if spec.options is not None and not any(json_equal(cleaned, o) for o in spec.options):
        allowed = ", ".join(_literal(o) for o in spec.options)
        problems.append(
            Problem(
                "enum_violation", path, f"{_literal(cleaned)} is not allowed; one of: {allowed}"
            )
        )
    return cleaned


def validate_fields(
    value: dict[str, Any], spec: TypeSpec, path: str, problems: list[Problem]
) -> dict[str, Any]:
    """An object's declared fields, each required; anything undeclared is dropped."""
    cleaned: dict[str, Any] = {}
    for field in spec.fields:
        sub = _join(path, field.name)
        if field.name not in value:
            if len(problems) < MAX_PROBLEMS:
                problems.append(Problem("missing_required", sub, "required field is missing"))
            continue
        cleaned[field.name] = validate_value(value[field.name], field.spec, sub, problems)
    return cleaned


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _mismatch(value: Any, spec: TypeSpec, path: str, problems: list[Problem]) -> Any:
    shown = f" {_literal(value)}" if isinstance(value, str | int | float | bool) else ""
    problems.append(
        Problem(
            "type_mismatch", path, f"expected {type_str(spec)}, got {json_type_name(value)}{shown}"
        )
    )
    return value


def _literal(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
