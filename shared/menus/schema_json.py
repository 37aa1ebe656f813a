"""The one JSON encoding of a schema, as it travels over the queue.

A schema (the payload of a schema option) encodes as an object node::

    {"type": "object", "fields": [FIELD, ...]}

A node (``TYPE``) is an object with a ``type`` and only the keys its type allows::

    {"type": "str" | "int" | "float" | "bool" | "any",
     "description"?: "<non-empty>", "nullable"?: true, "options"?: [<scalar>, ...]}
    {"type": "list",   "description"?: ..., "nullable"?: true, "items": TYPE}
    {"type": "object", "description"?: ..., "nullable"?: true, "fields": [FIELD, ...]}
    {"type": "dict",   "description"?: ..., "nullable"?: true, "values": TYPE}

A ``FIELD`` is a node with a ``name`` (non-empty, unique within its object); fields are a
list, not a JSON object, so their order (which the rendered menu follows) survives any JSON
library. ``nullable`` is present only when true; ``options`` (an enum of JSON scalars
matching the type; ints on a float field) only on scalar types. Every field of an object is
required; a value's fields outside the declaration are dropped. The encoding is canonical:
``schema_to_json(schema_from_json(j)) == j`` for every valid ``j``.

``SCHEMA_JSON_SCHEMA`` is its JSON Schema (2020-12; field-name uniqueness is checked by
``schema_from_json`` only). ``schema_from_json`` raises ``MenuSpecInvalid`` with the path.
``type_json_schema`` is something else: the standard JSON Schema a node describes, for
native tool parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from shared.menus.annotations import MAX_DEPTH
from shared.menus.errors import MenuSpecInvalid
from shared.menus.schema import SchemaLike, normalize_schema
from shared.menus.spec import KINDS, SCALAR_KINDS, Field, Scalar, Schema, TypeSpec

__all__ = [
    "SCHEMA_JSON_SCHEMA",
    "schema_from_json",
    "schema_to_json",
    "type_from_json",
    "type_json_schema",
    "type_to_json",
]


def schema_to_json(schema: SchemaLike) -> dict[str, Any]:
    """The encoding of a schema in the Python notation (or an already normalised one)."""
    return type_to_json(normalize_schema(schema).as_type())


def schema_from_json(obj: Any, *, path: str = "") -> Schema:
    if not isinstance(obj, Mapping):
        raise MenuSpecInvalid(path, f"a schema is a JSON object, not {type(obj).__name__}")
    extra = set(obj) - {"type", "fields"}
    if obj.get("type") != "object" or extra:
        raise MenuSpecInvalid(
            path, 'a schema is {"type": "object", "fields": [...]} and nothing else'
        )
    spec = type_from_json(obj, path=path)
    return Schema(spec.fields)


def type_to_json(spec: TypeSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"type": spec.kind}
    if spec.description is not None:
        out["description"] = spec.description
    if spec.nullable:
        out["nullable"] = True
    if spec.options is not None:
        out["options"] = list(spec.options)
    if spec.items is not None:
        out["items"] = type_to_json(spec.items)
    if spec.kind == "object":
        out["fields"] = [{"name": f.name, **type_to_json(f.spec)} for f in spec.fields]
    if spec.values is not None:
        out["values"] = type_to_json(spec.values)
    return out


_COMMON = frozenset({"type", "description", "nullable"})
_ALLOWED: dict[str, frozenset[str]] = {
    **{k: _COMMON | {"options"} for k in SCALAR_KINDS},
    "list": _COMMON | {"items"},
    "object": _COMMON | {"fields"},
    "dict": _COMMON | {"values"},
}
_REQUIRED: dict[str, str] = {"list": "items", "object": "fields", "dict": "values"}


def type_from_json(obj: Any, *, path: str = "", depth: int = 0, named: bool = False) -> TypeSpec:
    if depth > MAX_DEPTH:
        raise MenuSpecInvalid(path, f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(obj, Mapping):
        raise MenuSpecInvalid(path, f"a type is a JSON object, not {_name(obj)}")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in KINDS:
        raise MenuSpecInvalid(_at(path, "type"), f"type must be one of {', '.join(KINDS)}")
    allowed = _ALLOWED[kind] | ({"name"} if named else set())
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise MenuSpecInvalid(path, f"unexpected key(s) for type {kind}: {', '.join(unknown)}")
    needed = _REQUIRED.get(kind)
    if needed and needed not in obj:
        raise MenuSpecInvalid(path, f"type {kind} needs {needed!r}")
    description = obj.get("description")
    if "description" in obj and (not isinstance(description, str) or not description):
        raise MenuSpecInvalid(_at(path, "description"), "description is a non-empty string")
    if "nullable" in obj and obj["nullable"] is not True:
        raise MenuSpecInvalid(
            _at(path, "nullable"), "nullable is true when present (omit it otherwise)"
        )
    nullable = "nullable" in obj
    items = values = None
    fields: tuple[Field, ...] = ()
    if kind == "list":
        items = type_from_json(obj["items"], path=_at(path, "items"), depth=depth + 1)
    elif kind == "dict":
        values = type_from_json(obj["values"], path=_at(path, "values"), depth=depth + 1)
    elif kind == "object":
        fields = _fields_from_json(obj["fields"], _at(path, "fields"), depth)
    options = None
    if "options" in obj:
        options = _options_from_json(obj["options"], kind, nullable, _at(path, "options"))
    return TypeSpec(kind, description, options, nullable, items, fields, values)


def _fields_from_json(raw: Any, path: str, depth: int) -> tuple[Field, ...]:
    if not isinstance(raw, list):
        raise MenuSpecInvalid(path, "fields is a list of field objects")
    fields: list[Field] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MenuSpecInvalid(_at(where, "name"), "a field needs a non-empty string name")
        if name in seen:
            raise MenuSpecInvalid(_at(where, "name"), f"duplicate field name {name!r}")
        seen.add(name)
        fields.append(Field(name, type_from_json(item, path=where, depth=depth + 1, named=True)))
    return tuple(fields)


def _options_from_json(raw: Any, kind: str, nullable: bool, path: str) -> tuple[Scalar, ...]:
    if not isinstance(raw, list) or not raw:
        raise MenuSpecInvalid(path, "options is a non-empty list")
    out: list[Scalar] = []
    for i, value in enumerate(raw):
        if value is None:
            if not nullable:
                raise MenuSpecInvalid(f"{path}[{i}]", "null is an option only on a nullable type")
            out.append(None)
            continue
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, int | float) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "any": isinstance(value, str | int | float | bool),
        }[kind]
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise MenuSpecInvalid(f"{path}[{i}]", f"{value!r} is not a {kind}")
        out.append(float(value) if kind == "float" else value)
    return tuple(out)


def type_json_schema(spec: TypeSpec) -> dict[str, Any]:
    """The standard JSON Schema of the values a node accepts (native tool parameters)."""
    base: dict[str, Any]
    if spec.kind == "any":
        base = {}
    elif spec.kind == "list":
        assert spec.items is not None
        base = {"type": "array", "items": type_json_schema(spec.items)}
    elif spec.kind == "dict":
        assert spec.values is not None
        base = {"type": "object", "additionalProperties": type_json_schema(spec.values)}
    elif spec.kind == "object":
        base = {
            "type": "object",
            "properties": {f.name: type_json_schema(f.spec) for f in spec.fields},
            "required": [f.name for f in spec.fields],
            "additionalProperties": False,
        }
    else:
        base = {"type": _JSON_TYPES[spec.kind]}
    if spec.nullable and "type" in base:
        base["type"] = [base["type"], "null"]
    if spec.options is not None:
        base["enum"] = list(spec.options) + (
            [None] if spec.nullable and None not in spec.options else []
        )
    if spec.description:
        base["description"] = spec.description
    return base


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def _encoding_schema() -> dict[str, Any]:
    desc = {"type": "string", "minLength": 1}
    name = {"type": "string", "minLength": 1}

    def variants(named: bool) -> list[dict[str, Any]]:
        out = []
        option_items = {
            "str": {"type": ["string", "null"]},
            "int": {"type": ["integer", "null"]},
            "float": {"type": ["number", "null"]},
            "bool": {"type": ["boolean", "null"]},
            "any": {"type": ["string", "number", "boolean", "null"]},
        }
        for kind in KINDS:
            props: dict[str, Any] = {
                "type": {"const": kind},
                "description": desc,
                "nullable": {"const": True},
            }
            required = ["type"]
            if kind in option_items:
                props["options"] = {"type": "array", "minItems": 1, "items": option_items[kind]}
            elif kind == "list":
                props["items"] = {"$ref": "#/$defs/type"}
            elif kind == "dict":
                props["values"] = {"$ref": "#/$defs/type"}
            else:
                props["fields"] = {"type": "array", "items": {"$ref": "#/$defs/field"}}
            if kind in _REQUIRED:
                required.append(_REQUIRED[kind])
            if named:
                props["name"] = name
                required.insert(0, "name")
            out.append(
                {
                    "type": "object",
                    "properties": props,
                    "required": required,
                    "additionalProperties": False,
                }
            )
        return out

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "decision-worker menu schema encoding",
        "type": "object",
        "properties": {
            "type": {"const": "object"},
            "fields": {"type": "array", "items": {"$ref": "#/$defs/field"}},
        },
        "required": ["type", "fields"],
        "additionalProperties": False,
        "$defs": {"type": {"oneOf": variants(False)}, "field": {"oneOf": variants(True)}},
    }


SCHEMA_JSON_SCHEMA: dict[str, Any] = _encoding_schema()


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _name(value: Any) -> str:
    return type(value).__name__
