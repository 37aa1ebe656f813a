"""Python type annotations as schema nodes (for handler signatures and the notation).

Supported: ``str``, ``int``, ``float``, ``bool``, ``Any`` (or no annotation), ``list`` /
``list[T]``, ``dict`` / ``dict[str, T]``, ``Optional[T]`` / ``T | None``, ``Literal[...]`` of
JSON scalars, ``Annotated[T, "description", ...]`` and a total ``TypedDict`` (an object whose
every key is required). Anything else raises ``TypeError`` naming where it was found: a type
the model cannot send as JSON must not be silently treated as "anything".
"""

from __future__ import annotations

import types
import typing
from dataclasses import replace
from typing import Any, Literal

from shared.menus.spec import Field, Kind, Scalar, TypeSpec

__all__ = ["MAX_DEPTH", "annotation_description", "spec_from_annotation"]

#: Deeper nesting than this is refused, so that a self-referencing type cannot recurse forever.
MAX_DEPTH = 32

_SCALARS: dict[Any, Kind] = {str: "str", int: "int", float: "float", bool: "bool"}


def annotation_description(hint: Any) -> str | None:
    """The first string in an ``Annotated[...]``'s metadata, if any."""
    if typing.get_origin(hint) is typing.Annotated:
        for meta in hint.__metadata__:
            if isinstance(meta, str) and meta:
                return meta
    return None


def spec_from_annotation(hint: Any, *, where: str, depth: int = 0) -> TypeSpec:
    if depth > MAX_DEPTH:
        raise TypeError(f"{where}: type nested deeper than {MAX_DEPTH} levels")
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base = spec_from_annotation(hint.__origin__, where=where, depth=depth + 1)
        described = annotation_description(hint)
        return _with(base, description=described) if described else base
    if hint is Any or hint is typing.Any:
        return TypeSpec("any")
    if hint in _SCALARS:
        return TypeSpec(_SCALARS[hint])
    if hint is list or origin is list:
        return _list(hint, where, depth)
    if hint is dict or origin is dict:
        return _dict(hint, where, depth)
    if origin is typing.Union or origin is types.UnionType:
        return _optional(hint, where, depth)
    if origin is Literal:
        return _literal(typing.get_args(hint), where)
    if typing.is_typeddict(hint):
        return _typeddict(hint, where, depth)
    raise TypeError(
        f"{where}: unsupported annotation {_name(hint)}; use str, int, float, bool, Any, "
        "list[T], dict[str, T], Optional[T], Literal[...], Annotated[T, 'description'] "
        "or a TypedDict"
    )


def _list(hint: Any, where: str, depth: int) -> TypeSpec:
    args = typing.get_args(hint)
    item = spec_from_annotation(args[0], where=f"{where}[]", depth=depth + 1) if args else None
    return TypeSpec("list", items=item or TypeSpec("any"))


def _dict(hint: Any, where: str, depth: int) -> TypeSpec:
    args = typing.get_args(hint)
    if not args:
        return TypeSpec("dict", values=TypeSpec("any"))
    if args[0] is not str:
        raise TypeError(
            f"{where}: JSON object keys are strings; use dict[str, T], not {_name(hint)}"
        )
    return TypeSpec(
        "dict", values=spec_from_annotation(args[1], where=f"{where}.*", depth=depth + 1)
    )


def _optional(hint: Any, where: str, depth: int) -> TypeSpec:
    members = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(members) != 1:
        raise TypeError(
            f"{where}: unions other than Optional[T] are not supported ({_name(hint)}); use Any"
        )
    return _with(spec_from_annotation(members[0], where=where, depth=depth + 1), nullable=True)


def _literal(values: tuple[Any, ...], where: str) -> TypeSpec:
    nullable = any(v is None for v in values)
    options: list[Scalar] = [v for v in values if v is not None]
    for value in options:
        if not isinstance(value, str | int | float | bool):
            raise TypeError(f"{where}: Literal values must be JSON scalars, not {_name(value)}")
    if not options:
        raise TypeError(f"{where}: Literal[None] carries no choice")
    kind: Kind
    if all(isinstance(v, bool) for v in options):
        kind = "bool"
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in options):
        kind = "int"
    elif all(isinstance(v, str) for v in options):
        kind = "str"
    elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in options):
        kind = "float"
        options = [float(v) for v in options]  # type: ignore[arg-type]
    else:
        kind = "any"
    return TypeSpec(kind, options=tuple(options), nullable=nullable)


def _typeddict(hint: Any, where: str, depth: int) -> TypeSpec:
    try:
        hints = typing.get_type_hints(hint, include_extras=True)
    except Exception as exc:  # NameError and friends from unresolvable forward references
        raise TypeError(f"{where}: cannot resolve the annotations of {_name(hint)}: {exc}") from exc
    fields = []
    for name, sub in hints.items():
        # NotRequired is stripped: every declared field is required, as for schema options.
        while typing.get_origin(sub) in (typing.NotRequired, typing.Required):
            sub = typing.get_args(sub)[0]
        fields.append(
            Field(name, spec_from_annotation(sub, where=f"{where}.{name}", depth=depth + 1))
        )
    return TypeSpec("object", fields=tuple(fields))


def _with(spec: TypeSpec, **changes: Any) -> TypeSpec:
    return replace(spec, **changes)


def _name(hint: Any) -> str:
    return getattr(hint, "__qualname__", None) or repr(hint)
