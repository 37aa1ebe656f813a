"""Option containers, normalised: dict form and list form (see menus.md, "Options").

Dict form ``{name: handler}``; the key is the option name, also for functions. A handler is

- a callable: a function option (its docstring's first paragraph describes it);
- ``(callable, "desc")``: a function option with that description;
- ``("desc", {schema})`` (a 2-tuple whose second item is a dict or ``Schema`` and whose
  first is a string): a schema option;
- ``(value, "desc")``: a value option with a description;
- ``Handler("registered")``, ``(Handler("registered"), "desc")``: a worker handler;
- an already normalised option (renamed to its key);
- any other non-tuple: a value option (``None`` is a value, so is a dict).

Tuples are reserved syntax in handler position: a tuple matching none of the shapes above is
a ``TypeError``; to return a tuple (or a callable) as a value, wrap it:
``((1, 2), "desc")``, or pass ``ValueOption(name, value)``. Note the caveat of the seed: a
literal 2-tuple ``("a", "b")`` reads as the value ``"a"`` described by ``"b"``.

List form: a callable (named by its ``__name__``), ``(callable, "desc")``, ``Handler(...)``
(named by its registered name), ``(Handler(...), "desc")``, ``"name"`` (a value option whose
value is its name), ``("name", "desc")``, ``("name", "desc", schema)`` (a schema option), or a
normalised option.

Errors, all before any model call: a container that is not a dict or list, a malformed item,
a non-string name or description → ``TypeError``; empty options, an empty or blank name, a
duplicate name → ``ValueError``; a ``Handler`` missing from ``handlers`` →
``MenuSpecInvalid`` (a ``ValueError``) naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from shared.menus.errors import MenuSpecInvalid
from shared.menus.option_types import FunctionOption, Handler, Option, SchemaOption, ValueOption
from shared.menus.schema import normalize_schema
from shared.menus.signature import function_option
from shared.menus.spec import Schema

__all__ = ["OptionsLike", "check_name", "normalize_options"]

OptionsLike = Mapping[str, Any] | Sequence[Any]

_OPTION_TYPES = (FunctionOption, ValueOption, SchemaOption)


def normalize_options(
    options: OptionsLike, *, handlers: Mapping[str, Callable[..., Any]] | None = None
) -> tuple[Option, ...]:
    """The options as a tuple of normalised options, in declaration order."""
    normalized: list[Option]
    if isinstance(options, Mapping):
        normalized = [_dict_item(name, h, handlers) for name, h in options.items()]
    elif isinstance(options, Sequence) and not isinstance(options, str | bytes):
        normalized = [_list_item(i, item, handlers) for i, item in enumerate(options)]
    else:
        raise TypeError(f"options are a dict or a list, not {type(options).__name__}")
    if not normalized:
        raise ValueError("options must not be empty")
    seen: set[str] = set()
    for option in normalized:
        check_name(option.name)
        if option.name in seen:
            raise ValueError(f"duplicate option name {option.name!r}")
        seen.add(option.name)
    return tuple(normalized)


def check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"an option name is a string, not {type(name).__name__}")
    if not name.strip():
        raise ValueError("an option name must not be empty")
    if name != name.strip() or not name.isprintable():
        raise ValueError(f"option name {name!r} has surrounding blanks or control characters")
    return name


def _dict_item(
    name: Any, handler: Any, handlers: Mapping[str, Callable[..., Any]] | None
) -> Option:
    check_name(name)
    if isinstance(handler, _OPTION_TYPES):
        return replace(handler, name=name)
    if isinstance(handler, Handler):
        return _handler(name, handler, None, handlers)
    if isinstance(handler, tuple):
        return _dict_tuple(name, handler, handlers)
    if callable(handler):
        return function_option(name, handler)
    return ValueOption(name, handler)


def _dict_tuple(
    name: str, item: tuple[Any, ...], handlers: Mapping[str, Callable[..., Any]] | None
) -> Option:
    if len(item) == 2:
        first, second = item
        if isinstance(first, Handler) and _is_desc(second):
            return _handler(name, first, second, handlers)
        if callable(first) and _is_desc(second):
            return function_option(name, first, second)
        if isinstance(first, str) and isinstance(second, Mapping | Schema):
            return SchemaOption(name, normalize_schema(second), first or None)
        if _is_desc(second):
            return ValueOption(name, first, second or None)
    raise TypeError(
        f"option {name!r}: a tuple handler is (callable, 'desc'), ('desc', {{schema}}) or "
        f"(value, 'desc'), got a {len(item)}-tuple; wrap a tuple value as (value, 'desc')"
    )


def _list_item(index: int, item: Any, handlers: Mapping[str, Callable[..., Any]] | None) -> Option:
    if isinstance(item, _OPTION_TYPES):
        return item
    if isinstance(item, Handler):
        return _handler(item.name, item, None, handlers)
    if isinstance(item, str):
        return ValueOption(item, item)
    if isinstance(item, tuple):
        if len(item) == 2 and _is_desc(item[1]):
            first, desc = item
            if isinstance(first, Handler):
                return _handler(first.name, first, desc, handlers)
            if isinstance(first, str):
                return ValueOption(first, first, desc or None)
            if callable(first):
                return function_option(_callable_name(index, first), first, desc)
        if (
            len(item) == 3
            and isinstance(item[0], str)
            and (item[1] is None or isinstance(item[1], str))
            and isinstance(item[2], Mapping | Schema)
        ):
            return SchemaOption(item[0], normalize_schema(item[2]), item[1] or None)
    elif callable(item):
        return function_option(_callable_name(index, item), item)
    raise TypeError(
        f"options[{index}]: a list item is a callable, (callable, 'desc'), 'name', "
        f"('name', 'desc') or ('name', 'desc', schema), not {_shape(item)}"
    )


def _handler(
    name: str,
    ref: Handler,
    description: str | None,
    handlers: Mapping[str, Callable[..., Any]] | None,
) -> FunctionOption:
    func = (handlers if handlers is not None else {}).get(ref.name)
    if func is None:
        known = ", ".join(sorted(handlers if handlers is not None else {})) or "none"
        raise MenuSpecInvalid(name, f"unknown handler {ref.name!r} (registered: {known})")
    return function_option(name, func, description or None, handler=ref.name)


def _callable_name(index: int, func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        raise TypeError(f"options[{index}]: {func!r} has no usable __name__; name it in dict form")
    return name


def _is_desc(value: Any) -> bool:
    return isinstance(value, str)


def _shape(item: Any) -> str:
    if isinstance(item, tuple):
        return f"a {len(item)}-tuple of ({', '.join(type(v).__name__ for v in item)})"
    return f"a {type(item).__name__}"
