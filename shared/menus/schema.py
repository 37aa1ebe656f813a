"""The seed's schema notation, normalised into ``Schema``/``TypeSpec``.

A schema is ``{field_name: field_type}``; every declared field is required, recursively.

| notation | meaning |
|---|---|
| ``field: str`` (a supported Python type, see ``annotations``) | a scalar or typed container |
| ``field: "description"`` | a described ``str`` |
| ``field: [sub]`` | a list whose every item matches ``sub`` (exactly one template) |
| ``field: {sub: ...}`` | a nested object |
| ``field: {"type": T, "description": ..., "options": [...]}`` | a meta-spec |

A dict in field position whose keys ALL lie in ``META_KEYS`` is a meta-spec; any key outside
that set makes it a nested object. ``fields`` in a meta-spec is the escape hatch for a nested
object whose field names are all meta keys (``{"fields": {"type": str}}``); ``items`` is the
list item template. An empty dict is ambiguous and refused. The top level of a schema is
always a field map, never a meta-spec. Tuples are not schema notation (in option position
they are reserved syntax, see ``options``).

Mistakes raise ``TypeError`` (wrong shape or type) or ``ValueError`` (an empty enum), with the
field path, before any model call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shared.menus.annotations import MAX_DEPTH, spec_from_annotation
from shared.menus.spec import SCALAR_KINDS, Field, Scalar, Schema, TypeSpec

__all__ = ["META_KEYS", "SchemaLike", "normalize_schema", "spec_from_notation"]

META_KEYS = frozenset({"type", "description", "options", "fields", "items"})

SchemaLike = Mapping[str, Any] | Schema

_MISSING = object()


def normalize_schema(notation: SchemaLike) -> Schema:
    """The ``Schema`` for a field map in the notation (a ``Schema`` is returned as is)."""
    if isinstance(notation, Schema):
        return notation
    if not isinstance(notation, Mapping):
        raise TypeError(f"a schema is a dict of fields, not {type(notation).__name__}")
    return Schema(_fields(notation, prefix="", depth=0))


def spec_from_notation(value: Any, *, path: str = "", depth: int = 0) -> TypeSpec:
    """One field type in the notation."""
    where = path or "(schema)"
    if depth > MAX_DEPTH:
        raise TypeError(f"{where}: schema nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return TypeSpec("str", description=value or None)
    if isinstance(value, list):
        if len(value) != 1:
            raise TypeError(
                f"{where}: a list schema holds exactly one item template, got {len(value)}"
            )
        return TypeSpec(
            "list", items=spec_from_notation(value[0], path=f"{path}[]", depth=depth + 1)
        )
    if isinstance(value, Mapping):
        if not value:
            raise TypeError(f"{where}: an empty dict is ambiguous; use dict for any object")
        if all(isinstance(k, str) for k in value) and set(value) <= META_KEYS:
            return _meta(value, path, depth)
        return TypeSpec("object", fields=_fields(value, prefix=path, depth=depth + 1))
    if isinstance(value, tuple):
        raise TypeError(f"{where}: tuples are not schema notation; use [template] for a list")
    if isinstance(value, Schema):
        return value.as_type()
    if isinstance(value, TypeSpec):
        return value
    if value is None:
        raise TypeError(f"{where}: None is not a type; use Optional[T]")
    return spec_from_annotation(value, where=where, depth=depth)


def _fields(notation: Mapping[Any, Any], *, prefix: str, depth: int) -> tuple[Field, ...]:
    fields = []
    for name, sub in notation.items():
        if not isinstance(name, str):
            raise TypeError(f"{prefix or '(schema)'}: field names are strings, not {name!r}")
        if not name:
            raise ValueError(f"{prefix or '(schema)'}: a field name must not be empty")
        path = f"{prefix}.{name}" if prefix else name
        fields.append(Field(name, spec_from_notation(sub, path=path, depth=depth + 1)))
    return tuple(fields)


def _meta(meta: Mapping[str, Any], path: str, depth: int) -> TypeSpec:
    where = path or "(schema)"
    if "fields" in meta and "items" in meta:
        raise TypeError(f"{where}: a meta-spec has fields (an object) or items (a list), not both")
    kind = meta.get("type", _MISSING)
    if isinstance(kind, str):
        raise TypeError(
            f"{where}: meta-spec type is a Python type such as int, not the string {kind!r}"
        )
    if "fields" in meta:
        if kind not in (_MISSING, dict):
            raise TypeError(f"{where}: a meta-spec with fields is an object; drop type or use dict")
        sub = meta["fields"]
        if not isinstance(sub, Mapping):
            raise TypeError(f"{where}: meta-spec fields is a dict of fields")
        spec = TypeSpec("object", fields=_fields(sub, prefix=path, depth=depth + 1))
    elif "items" in meta:
        if kind not in (_MISSING, list):
            raise TypeError(f"{where}: a meta-spec with items is a list; drop type or use list")
        spec = TypeSpec(
            "list", items=spec_from_notation(meta["items"], path=f"{path}[]", depth=depth + 1)
        )
    elif kind is _MISSING:
        spec = TypeSpec("str")
    else:
        spec = spec_from_notation(kind, path=path, depth=depth + 1)
    description = meta.get("description")
    if description is not None and not isinstance(description, str):
        raise TypeError(f"{where}: description must be a string")
    if description:
        spec = replace(spec, description=description)
    if "options" in meta:
        spec = replace(spec, options=_options(meta["options"], spec, where))
    return spec


def _options(raw: Any, spec: TypeSpec, where: str) -> tuple[Scalar, ...]:
    if not isinstance(raw, list | tuple):
        raise TypeError(f"{where}: options is a list of allowed values")
    if not raw:
        raise ValueError(f"{where}: options must not be empty")
    if spec.kind not in SCALAR_KINDS:
        raise TypeError(f"{where}: options apply to scalar fields, not {spec.kind}")
    return tuple(coerce_option(v, spec, where) for v in raw)


def coerce_option(value: Any, spec: TypeSpec, where: str) -> Scalar:
    """An enum value checked against its field's type (ints become floats on a float field)."""
    if value is None:
        if not spec.nullable:
            raise TypeError(f"{where}: option None on a field that is not Optional")
        return None
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "any": isinstance(value, str | int | float | bool),
    }[spec.kind]
    if not ok:
        raise TypeError(f"{where}: option {value!r} is not a {spec.kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"{where}: option {value!r} is not a JSON number")
    return float(value) if spec.kind == "float" else value
