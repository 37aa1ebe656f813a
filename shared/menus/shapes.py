"""How a ``TypeSpec`` reads to the model: its type string and its JSON placeholder.

``type_str`` spells the full shape (``list[{action: str, target: str}]``, not ``list``), so
the signature line alone tells the model what to send. ``example_value`` is the placeholder
used in a ``Call:`` line: native JSON literals (``"<str>"``, ``0``, ``0.0``, ``false``,
``[]``, ``{}``), the first allowed value for an enum, and the nested shape for lists of
objects and objects.
"""

from __future__ import annotations

from typing import Any

from shared.menus.spec import TypeSpec

__all__ = ["example_value", "type_str"]

_PLACEHOLDERS: dict[str, Any] = {
    "str": "<str>",
    "int": 0,
    "float": 0.0,
    "bool": False,
    "any": "<any>",
}


def type_str(spec: TypeSpec) -> str:
    text = _bare(spec)
    return f"{text} | null" if spec.nullable else text


def _bare(spec: TypeSpec) -> str:
    if spec.kind == "list":
        assert spec.items is not None
        return (
            "list"
            if spec.items.kind == "any" and not spec.items.nullable
            else f"list[{type_str(spec.items)}]"
        )
    if spec.kind == "dict":
        assert spec.values is not None
        return (
            "dict"
            if spec.values.kind == "any" and not spec.values.nullable
            else f"dict[str, {type_str(spec.values)}]"
        )
    if spec.kind == "object":
        return "{" + ", ".join(f"{f.name}: {type_str(f.spec)}" for f in spec.fields) + "}"
    return spec.kind


def example_value(spec: TypeSpec) -> Any:
    if spec.options:
        return spec.options[0]
    if spec.kind == "list":
        assert spec.items is not None
        # An untyped list has no item shape worth showing; a typed one shows one item.
        return [] if spec.items.kind == "any" else [example_value(spec.items)]
    if spec.kind == "dict":
        return {}
    if spec.kind == "object":
        return {f.name: example_value(f.spec) for f in spec.fields}
    return _PLACEHOLDERS[spec.kind]
