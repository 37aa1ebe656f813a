"""Strict JSON at every entrance: how a text is read.

Python's ``json`` reads more than JSON and rewrites some of it silently: ``NaN`` and
``Infinity`` (and ``1e400``, read as infinity), duplicate keys (the last one wins), lone
surrogates (``"\\ud800"``), a byte order mark in bytes, UTF-16 and UTF-32 bytes. None of that
may reach a provider, a ledger row or a digest. Reading is split in two so that each problem
is named where it is:

- ``decode_text`` turns bytes into text: UTF-8 only, no byte order mark. Its ``NotStrictJSON``
  is about the whole line or message.
- ``loads`` parses text or bytes, *marking* instead of raising what only a walk can place:
  an object with a duplicate key is a ``DuplicateKeys`` (a dict, last value kept, the
  repeated keys listed), ``NaN``/``Infinity`` are non-finite floats. A syntax error or a
  nesting too deep for the parser is ``NotStrictJSON``; a text nested deeper than the parser
  goes is read with its deepest values cut out (``clip_deep``, each one ``CLIPPED``).

What a value read so may be made of (the marks, lone surrogates, huge integers, depth and
size) is checked by the walk in ``shared.json_measure``, which places each problem on its
path.

The standard library's decoder does the parsing (in C); only the marks are Python. No JSON
library on PyPI reports duplicate keys with their place; orjson and simdjson keep the last.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any, Final

from shared.errors import NotStrictJSON

__all__ = [
    "CLIPPED",
    "CLIP_DEPTH",
    "DuplicateKeys",
    "clip_deep",
    "decode_text",
    "dumps",
    "loads",
]

_BOM = "\ufeff"


class DuplicateKeys(dict[str, Any]):
    """An object read from text that named a key twice: the last value, and which keys."""

    def __init__(self, pairs: list[tuple[str, Any]], duplicates: list[str]) -> None:
        super().__init__(pairs)
        self.duplicates = duplicates

    def __reduce__(self) -> Any:  # picklable (the worker hands decoded bodies to its pool)
        return (DuplicateKeys, (list(self.items()), self.duplicates))


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    repeated = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
    return DuplicateKeys(pairs, repeated)


def _constant(name: str) -> float:
    # NaN, Infinity, -Infinity: kept as floats, which ``json_measure.measure`` refuses with
    # their place.
    return float(name.lower().replace("infinity", "inf"))


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant)
#: Values nested deeper than this are cut out of a text the parser cannot read whole, so that
#: the rest (the other jobs of a message, the id of the deep one) still reads.
CLIP_DEPTH: Final = 256
#: What stands for a cut-out value: no text can name it (a random part, per process).
CLIPPED: Final = f"\x00nested too deep to read {secrets.token_hex(8)}"
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def clip_deep(text: str, limit: int = CLIP_DEPTH) -> str:
    """``text`` with every value that opens deeper than ``limit`` replaced by ``CLIPPED``."""
    out: list[str] = []
    last = depth = 0
    start = -1
    for match in _STRUCTURE.finditer(text):
        char = match.group()[0]
        if char == '"':
            continue
        if char in "[{":
            depth += 1
            if depth == limit + 1:
                start = match.start()
        else:
            if depth == limit + 1 and start >= 0:
                out += (text[last:start], json.dumps(CLIPPED))
                last, start = match.end(), -1
            depth -= 1
    out.append(text[last:])
    return "".join(out)


def decode_text(data: bytes | bytearray | memoryview | str) -> str:
    """``data`` as text: UTF-8 without a byte order mark, else ``NotStrictJSON`` saying where."""
    if isinstance(data, str):
        text = data
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotStrictJSON(
                f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
            ) from None
    if text.startswith(_BOM):
        raise NotStrictJSON("starts with a byte order mark (U+FEFF); save it as UTF-8 without one")
    return text


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse ``data`` as JSON, marking duplicate keys and NaN/Infinity (see the module doc).

    ``NotStrictJSON`` if it is not UTF-8, carries a byte order mark, is not JSON, or nests
    deeper than the parser can go."""
    text = decode_text(data)
    try:
        return _decode(text)
    except RecursionError:
        pass
    # Too deep for the parser somewhere: read it again with the deepest values cut out
    # (``json_measure.measure`` names each ``CLIPPED`` value as too deep, with its place).
    try:
        return _decode(clip_deep(text))
    except RecursionError:
        raise NotStrictJSON("nested too deep to read") from None


def _decode(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        # json ends some messages with "at" (its place follows): one "at" before ours.
        raise NotStrictJSON(f"not JSON: {exc.msg.removesuffix(' at')} at {where}") from None
    except RecursionError:
        raise
    except ValueError as exc:  # an integer of over 4,300 digits
        raise NotStrictJSON(f"not JSON: {str(exc)[:100]}") from None


def dumps(value: Any) -> str:
    """Compact JSON, refusing NaN and Infinity (``ValueError``) rather than writing them."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
