"""Test support for the menu engine: a small JSON Schema checker and hypothesis strategies.

``jsonschema`` is not a dependency, so ``schema_errors`` implements the subset of JSON Schema
2020-12 the engine's published schemas use ($ref to $defs, type, const, enum, properties,
required, additionalProperties, items, minItems, minLength, pattern, oneOf, anyOf).
"""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

from __future__ import annotations

import re
from typing import Any, Optional

from hypothesis import strategies as st

from shared.menus import Field, Schema, TypeSpec
from shared.menus.schema import META_KEYS

_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def schema_errors(value: Any, schema: Any, root: Any | None = None, path: str = "$") -> list[str]:
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: nothing is allowed"]
    errors: list[str] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        errors += schema_errors(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path)
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[k](value) for k in kinds):
            return [*errors, f"{path}: not of type {kinds}"]
    if "const" in schema and not _same(value, schema["const"]):
        errors.append(f"{path}: not {schema['const']!r}")
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        errors.append(f"{path}: not in enum")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: too short")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: too few items")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += schema_errors(item, schema["items"], root, f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing {key}")
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], root, f"{path}.{key}")
            elif "additionalProperties" in schema:
                errors += schema_errors(item, schema["additionalProperties"], root, f"{path}.{key}")
    if "oneOf" in schema:
        matching = [s for s in schema["oneOf"] if not schema_errors(value, s, root, path)]
        if len(matching) != 1:
            errors.append(f"{path}: matches {len(matching)} of oneOf")
    if "anyOf" in schema and all(schema_errors(value, s, root, path) for s in schema["anyOf"]):
        errors.append(f"{path}: matches none of anyOf")
    return errors


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


# -- hypothesis strategies for the normalised schema model ------------------------------------

names = st.text(min_size=1, max_size=6)
descriptions = st.none() | st.text(min_size=1, max_size=12)
_SCALAR_VALUES = {
    "str": st.text(max_size=4),
    "int": st.integers(-(10**6), 10**6),
    "float": st.floats(allow_nan=False, allow_infinity=False, width=32),
    "bool": st.booleans(),
    "any": st.one_of(st.text(max_size=4), st.integers(-9, 9), st.booleans()),
}


@st.composite
def scalar_specs(draw: st.DrawFn, *, containers_nullable: bool = True) -> TypeSpec:
    kind = draw(st.sampled_from(sorted(_SCALAR_VALUES)))
    nullable = draw(st.booleans())
    options = None
    if draw(st.booleans()):
        values: list[Any] = draw(st.lists(_SCALAR_VALUES[kind], min_size=1, max_size=3))
        if kind == "float":
            values = [float(v) for v in values]
        if nullable and draw(st.booleans()):
            values.append(None)
        options = tuple(values)
    return TypeSpec(kind, draw(descriptions), options, nullable)  # type: ignore[arg-type]


def type_specs(
    *, with_dict: bool = True, nullable_containers: bool = True
) -> st.SearchStrategy[TypeSpec]:
    nullable = st.booleans() if nullable_containers else st.just(False)

    def extend(children: st.SearchStrategy[TypeSpec]) -> st.SearchStrategy[TypeSpec]:
        field_lists = st.lists(st.tuples(names, children), max_size=3, unique_by=lambda t: t[0])
        variants = [
            st.builds(
                lambda i, d, n: TypeSpec("list", d, None, n, items=i),
                children,
                descriptions,
                nullable,
            ),
            st.builds(
                lambda fs, d, n: TypeSpec(
                    "object", d, None, n, fields=tuple(Field(k, v) for k, v in fs)
                ),
                field_lists,
                descriptions,
                nullable,
            ),
        ]
        if with_dict:
            variants.append(
                st.builds(
                    lambda v, d, n: TypeSpec("dict", d, None, n, values=v),
                    children,
                    descriptions,
                    nullable,
                )
            )
        return st.one_of(*variants)

    return st.recursive(scalar_specs(), extend, max_leaves=8)


def schemas(**kwargs: Any) -> st.SearchStrategy[Schema]:
    field_lists = st.lists(
        st.tuples(names, type_specs(**kwargs)), max_size=4, unique_by=lambda t: t[0]
    )
    return field_lists.map(lambda fs: Schema(tuple(Field(k, v) for k, v in fs)))


# -- the Python notation for a spec (for notation round-trips) -------------------------------

_PY = {"str": str, "int": int, "float": float, "bool": bool, "any": Any}


def to_notation(spec: TypeSpec) -> Any:
    """A Python-notation spelling of ``spec`` (no dicts, no nullable containers)."""
    if spec.kind in _PY:
        py: Any = _PY[spec.kind]
        if spec.nullable:
            py = Optional[py]
        if spec.options is None and not spec.nullable and spec.kind == "str" and spec.description:
            return spec.description
        if spec.options is None and spec.description is None:
            return py
        meta: dict[str, Any] = {"type": py}
        if spec.description is not None:
            meta["description"] = spec.description
        if spec.options is not None:
            meta["options"] = list(spec.options)
        return meta
    if spec.kind == "list":
        assert spec.items is not None
        if spec.description is None:
            return [to_notation(spec.items)]
        return {"items": to_notation(spec.items), "description": spec.description}
    assert spec.kind == "object"
    fields = {f.name: to_notation(f.spec) for f in spec.fields}
    if fields and spec.description is None and not set(fields) <= META_KEYS:
        return fields
    meta = {"fields": fields}
    if spec.description is not None:
        meta["description"] = spec.description
    return meta


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
