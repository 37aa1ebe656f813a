"""Digging the JSON pick out of a reply (``extract_action``).

The pick can sit in a fenced block (```` ```json ```` or a bare fence), or in prose. At every
``{`` the scanner tries to read one JSON object (``json.JSONDecoder.raw_decode``: braces are
balanced and string contents, escapes included, never count); an object read is skipped
whole, so objects nested in it (an argument that happens to have an ``action`` key) are not
candidates; a ``{`` that does not start an object is passed by one character. Fences need no
special case: a fence line is prose around the object. ``NaN``/``Infinity`` are not JSON
and do not parse.

A candidate carries a call key: ``call`` or one of its aliases ``action``, ``function``,
``tool`` (the first present in that order is the call key; any others are ordinary fields).
Work first, decide last: the LAST candidate wins.

Where the arguments live: ``{"call": "name", "args": {...}}`` is the shape the menu's
``Call:`` lines show; ``arguments`` is accepted for ``args``, and its value may also be a
JSON string holding an object (as native tool calls send it). Without ``args``/``arguments``
the object is flat, ``{"call": "name", field: ...}``: every other key is an argument.

Failures are ``PickError`` only, never a raw ``TypeError``: no candidate (``no_action``), a
call that is not a string (``unknown_call``), args that are not an object (``bad_args``), a
reply that is not text (``no_action``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from shared.menus.errors import PickError
from shared.menus.validate import json_type_name

__all__ = ["ARGS_KEYS", "CALL_KEYS", "MAX_SCAN_CHARS", "extract_action", "read_action"]

CALL_KEYS = ("call", "action", "function", "tool")
ARGS_KEYS = ("args", "arguments")
#: Only the tail this long is scanned (the last pick wins), which bounds the scan's cost.
MAX_SCAN_CHARS = 200_000


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def extract_action(text: object) -> tuple[str, dict[str, Any], str]:
    """``(call_name, args, raw_json)`` of the last JSON object in ``text`` with a call key."""
    if not isinstance(text, str):
        raise PickError("no_action", f"the reply is not text (got {type(text).__name__})")
    found: tuple[dict[str, Any], str] | None = None
    broken = 0
    for obj, raw in _objects(text[-MAX_SCAN_CHARS:]):
        if obj is None:
            broken += 1
        elif call_key(obj) is not None:
            found = (obj, raw)
    if found is None:
        hint = " (a JSON object that mentions a call key did not parse)" if broken else ""
        raise PickError(
            "no_action",
            'no JSON object with a "call" key found in the reply'
            + hint
            + '; reply with {"call": "<option name>", "args": {...}}',
        )
    name, args = read_action(found[0])
    return name, args, found[1]


def read_action(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call name and arguments of one pick object (also used for a reviewer's answer)."""
    key = call_key(obj)
    if key is None:
        raise PickError("no_action", 'the pick has no "call" key')
    name = obj[key]
    if not isinstance(name, str):
        raise PickError(
            "unknown_call", f'"{key}" must be a string naming an option, got {_json_name(name)}'
        )
    for args_key in ARGS_KEYS:
        if args_key in obj:
            return name, _args(obj[args_key], args_key)
    return name, {k: v for k, v in obj.items() if k != key}


def call_key(obj: dict[str, Any]) -> str | None:
    for key in CALL_KEYS:
        if key in obj:
            return key
    return None


def _args(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = _DECODER.decode(value)
        except (ValueError, RecursionError):
            raise PickError(
                "bad_args", f'"{key}" must be a JSON object, got a string', path=key
            ) from None
    if not isinstance(value, dict):
        raise PickError(
            "bad_args", f'"{key}" must be a JSON object, got {_json_name(value)}', path=key
        )
    return value


def _objects(text: str) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """Yield ``(object, raw)`` for each top-level JSON object; ``(None, raw)`` for broken ones
    that look like a pick (so that "nothing found" can say why)."""
    i = text.find("{")
    while i >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError):
            if any(f'"{k}"' in text[i : i + 200] for k in CALL_KEYS):
                yield None, ""
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            yield obj, text[i:end]
        i = text.find("{", end)


def _json_name(value: Any) -> str:
    return {"array": "an array", "object": "an object", "integer": "an integer"}.get(
        json_type_name(value), f"a {json_type_name(value)}"
    )
