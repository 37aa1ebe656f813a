"""The normalised schema model every notation and encoding turns into.

A ``TypeSpec`` is one node of a payload schema; a ``Schema`` is the field map of a schema
option (an object whose every field is required). Nothing here knows about Python notation
or JSON: ``schema.py`` parses the notation, ``schema_json.py`` the wire encoding, and both
produce these frozen values, so equality of two schemas is plain ``==``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["KINDS", "SCALAR_KINDS", "Field", "Kind", "Scalar", "Schema", "TypeSpec"]

Kind = Literal["str", "int", "float", "bool", "any", "list", "object", "dict"]
#: An allowed enum value: JSON scalars only, so that equality is unambiguous on the wire.
Scalar = str | int | float | bool | None

KINDS: tuple[Kind, ...] = ("str", "int", "float", "bool", "any", "list", "object", "dict")
#: Kinds that may carry ``options`` (an enum); containers never do.
SCALAR_KINDS: frozenset[str] = frozenset({"str", "int", "float", "bool", "any"})


@dataclass(frozen=True)
class TypeSpec:
    """One schema node.

    ``object`` has a fixed, ordered field list (every field required, extras dropped);
    ``dict`` is an open map from string keys to ``values``; ``list`` holds ``items``.
    ``nullable`` admits JSON ``null`` (from ``Optional[T]``).
    """

    kind: Kind
    description: str | None = None
    options: tuple[Scalar, ...] | None = None
    nullable: bool = False
    items: TypeSpec | None = None
    fields: tuple[Field, ...] = ()
    values: TypeSpec | None = None

    def __post_init__(self) -> None:
        # Invariants, so that every consumer (render, validate, encode) can rely on them.
        if self.kind not in KINDS:
            raise TypeError(f"unknown schema kind {self.kind!r}")
        if (self.kind == "list") != (self.items is not None):
            raise TypeError("a list spec needs items, and only a list spec has them")
        if (self.kind == "dict") != (self.values is not None):
            raise TypeError("a dict spec needs values, and only a dict spec has them")
        if self.kind != "object" and self.fields:
            raise TypeError("only an object spec has fields")
        if self.options is not None and (self.kind not in SCALAR_KINDS or not self.options):
            raise TypeError("options must be a non-empty enum on a scalar spec")


@dataclass(frozen=True)
class Field:
    """A named field of an object spec."""

    name: str
    spec: TypeSpec


@dataclass(frozen=True)
class Schema:
    """The payload of a schema option: an ordered map of required fields."""

    fields: tuple[Field, ...] = ()

    def as_type(self) -> TypeSpec:
        return TypeSpec("object", fields=self.fields)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)
