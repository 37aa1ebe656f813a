"""The one JSON encoding of a menu's options, as they travel in a job.

``options`` is a non-empty JSON array, in menu order, of::

    {"kind": "handler", "name": "refund", "handler": "issue_refund", "description"?: "..."}
    {"kind": "value",   "name": "done",   "value": <any JSON>,        "description"?: "..."}
    {"kind": "schema",  "name": "plan",   "schema": SCHEMA,           "description"?: "..."}

``SCHEMA`` is the schema encoding of ``schema_json``. A ``handler`` names a function
registered in the worker (an allowlist: a job never names arbitrary code); its payload
schema comes from that function's signature on the worker side, and ``description``, when
present, replaces the handler's docstring in the menu (``menu_to_json`` writes it only when
it differs from the function's own docstring, so that a decoded menu encodes back to the
same JSON). Names are non-empty, without
surrounding blanks, unique. No other keys are allowed.

``menu_to_json(options)`` (client side) encodes the Python forms: a callable encodes as the
handler named by its ``__name__``; ``Handler("registered")`` as that name; a value option's
value must be plain JSON (dict with string keys, list, str, int, finite float, bool, None;
not a tuple) or it is a ``TypeError``. ``menu_from_json(obj, handlers)`` (worker side)
decodes into a ``Menu``; anything invalid, including a handler name missing from
``handlers``, is ``MenuSpecInvalid`` with the path (``[2].handler``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from shared.menus.errors import MenuSpecInvalid
from shared.menus.menu import Menu, build_menu
from shared.menus.option_types import FunctionOption, Option, SchemaOption, ValueOption
from shared.menus.options import check_name, normalize_options
from shared.menus.schema_json import SCHEMA_JSON_SCHEMA, schema_from_json, schema_to_json
from shared.menus.signature import docstring_description, function_option

__all__ = ["OPTIONS_JSON_SCHEMA", "PICK_JSON_SCHEMA", "menu_from_json", "menu_to_json"]


def menu_to_json(options: Any) -> list[dict[str, Any]]:
    normalized = (
        options.options
        if isinstance(options, Menu)
        else normalize_options(options, handlers=_AnyHandler())
    )
    return [_option_to_json(o) for o in normalized]


def menu_from_json(obj: Any, handlers: Mapping[str, Callable[..., Any]]) -> Menu:
    if not isinstance(obj, list) or not obj:
        raise MenuSpecInvalid("", "options is a non-empty JSON array")
    options: list[Option] = []
    seen: set[str] = set()
    for i, item in enumerate(obj):
        option = _option_from_json(item, f"[{i}]", handlers)
        if option.name in seen:
            raise MenuSpecInvalid(f"[{i}].name", f"duplicate option name {option.name!r}")
        seen.add(option.name)
        options.append(option)
    return build_menu(tuple(options))


def _option_to_json(option: Option) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(option, FunctionOption):
        handler = option.handler or getattr(option.func, "__name__", None)
        if not isinstance(handler, str):
            raise TypeError(
                f"option {option.name!r}: {option.func!r} has no name to register it by"
            )
        out = {"kind": "handler", "name": option.name, "handler": handler}
        if option.description and option.description != docstring_description(option.func):
            out["description"] = option.description
        return out
    if isinstance(option, ValueOption):
        _check_json(option.value, option.name)
        out = {"kind": "value", "name": option.name, "value": option.value}
    else:
        out = {"kind": "schema", "name": option.name, "schema": schema_to_json(option.schema)}
    if option.description:
        out["description"] = option.description
    return out


_KEYS = {
    "handler": ({"kind", "name", "handler"}, {"description"}),
    "value": ({"kind", "name", "value"}, {"description"}),
    "schema": ({"kind", "name", "schema"}, {"description"}),
}


def _option_from_json(item: Any, path: str, handlers: Mapping[str, Callable[..., Any]]) -> Option:
    if not isinstance(item, Mapping):
        raise MenuSpecInvalid(path, "an option is a JSON object")
    kind = item.get("kind")
    if kind not in _KEYS:
        raise MenuSpecInvalid(f"{path}.kind", "kind is one of handler, value, schema")
    required, optional = _KEYS[kind]
    missing = sorted(required - set(item))
    if missing:
        raise MenuSpecInvalid(path, f"missing key(s): {', '.join(missing)}")
    unknown = sorted(str(k) for k in item if k not in required | optional)
    if unknown:
        raise MenuSpecInvalid(path, f"unexpected key(s): {', '.join(unknown)}")
    name = item["name"]
    try:
        check_name(name)
    except (TypeError, ValueError) as exc:
        raise MenuSpecInvalid(f"{path}.name", str(exc)) from None
    description = item.get("description")
    if "description" in item and (not isinstance(description, str) or not description):
        raise MenuSpecInvalid(f"{path}.description", "description is a non-empty string")
    if kind == "value":
        return ValueOption(name, item["value"], description)
    if kind == "schema":
        schema = schema_from_json(item["schema"], path=f"{path}.schema")
        try:
            return SchemaOption(name, schema, description)
        except ValueError as exc:  # a "decision" field, which would replace the result's key
            raise MenuSpecInvalid(f"{path}.schema", str(exc)) from None
    handler = item["handler"]
    if not isinstance(handler, str) or not handler:
        raise MenuSpecInvalid(f"{path}.handler", "handler is a registered handler's name")
    func = handlers.get(handler)
    if func is None:
        known = ", ".join(sorted(handlers)) or "none"
        raise MenuSpecInvalid(
            f"{path}.handler", f"unknown handler {handler!r} (registered: {known})"
        )
    return function_option(name, func, description, handler=handler)


def _check_json(value: Any, option: str, path: str = "value") -> None:
    problem = _json_problem(value, path)
    if problem:
        raise TypeError(f"option {option!r}: a value on the queue must be plain JSON; {problem}")


def _json_problem(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}"
    if isinstance(value, list):
        for i, v in enumerate(value):
            if problem := _json_problem(v, f"{path}[{i}]"):
                return problem
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path} has the key {k!r}, not a string"
            if problem := _json_problem(v, f"{path}.{k}"):
                return problem
        return None
    return f"{path} is a {type(value).__name__}"


def _any_handler(**kwargs: Any) -> Any:  # pragma: no cover - never called, only encoded
    return kwargs


class _AnyHandler(Mapping[str, Callable[..., Any]]):
    """Resolves every ``Handler`` reference, so that a client can encode one it cannot import."""

    def __getitem__(self, key: str) -> Callable[..., Any]:
        return _any_handler

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _options_schema() -> dict[str, Any]:
    text = {"type": "string", "minLength": 1}
    name = {"type": "string", "minLength": 1, "pattern": r"^\S(.*\S)?$"}

    def variant(kind: str, key: str, value: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"kind": {"const": kind}, "name": name, key: value, "description": text},
            "required": ["kind", "name", key],
            "additionalProperties": False,
        }

    defs = dict(SCHEMA_JSON_SCHEMA["$defs"])
    defs["schema"] = {
        k: v for k, v in SCHEMA_JSON_SCHEMA.items() if k not in {"$defs", "$schema", "title"}
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "decision-worker menu options encoding",
        "type": "array",
        "minItems": 1,
        "items": {
            "oneOf": [
                variant("handler", "handler", text),
                variant("value", "value", {}),
                variant("schema", "schema", {"$ref": "#/$defs/schema"}),
            ]
        },
        "$defs": defs,
    }


OPTIONS_JSON_SCHEMA: dict[str, Any] = _options_schema()

#: A pick on the wire (what the model is asked for, what a reviewer answers, what is stored).
PICK_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "decision-worker menu pick",
    "type": "object",
    "properties": {"call": {"type": "string", "minLength": 1}, "args": {"type": "object"}},
    "required": ["call"],
}
