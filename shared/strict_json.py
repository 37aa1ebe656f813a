"""Strict JSON at every entrance: what a job may be made of, and how it is read.

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
  nesting too deep for the parser is ``NotStrictJSON``.
- ``measure`` walks a value with an explicit stack (never recursion: a hostile value may be
  thousands of levels deep) and reports the first thing that is not strict JSON, or that
  breaks the depth, size or string limits it is given, with its path (``state.a[3]``),
  together with the value's size: the exact bytes of its compact JSON in UTF-8 (``dumps``),
  escapes, digits and separators included, so that a size limit holds to the byte. A size
  estimated per value (every number 8 bytes, every character one) let a string of control
  characters pass its limit six times over. ``shared.limits`` applies it to each field.

The standard library's decoder does the parsing (in C); only the marks are Python. No JSON
library on PyPI reports duplicate keys with their place; orjson and simdjson keep the last.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, Final

from shared.errors import NotStrictJSON

__all__ = [
    "CLIPPED",
    "CLIP_DEPTH",
    "MAX_INT_DIGITS",
    "DuplicateKeys",
    "Measure",
    "clip_deep",
    "decode_text",
    "dumps",
    "loads",
    "measure",
    "strict_loads",
    "string_size",
]

#: Integers with more digits than this are refused: many readers hold numbers as doubles,
#: and Python refuses to print one of over 4,300 digits (json.dumps raises).
MAX_INT_DIGITS: Final = 100
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219)  # log2(10): bits of a 100-digit number
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
    # NaN, Infinity, -Infinity: kept as floats, which ``measure`` refuses with their place.
    return float(name.lower().replace("infinity", "inf"))


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant)
#: Values nested deeper than this are cut out of a text the parser cannot read whole, so that
#: the rest (the other jobs of a message, the id of the deep one) still reads.
CLIP_DEPTH: Final = 256
#: What stands for a cut-out value: no text can name it (a random part, per process).
CLIPPED: Final = f"\x00nested too deep to read {secrets.token_hex(8)}"
_CLIPPED_LEN = len(CLIPPED)
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
    # (``measure`` names each ``CLIPPED`` value as too deep, with its place).
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


def strict_loads(data: bytes | bytearray | memoryview | str, *, max_depth: int = 100) -> Any:
    """``loads``, refusing anything ``measure`` finds (``NotStrictJSON`` naming the path)."""
    value = loads(data)
    found = measure(value, max_depth=max_depth)
    if found.problem is not None:
        where, what = found.problem
        raise NotStrictJSON(f"{where or '(value)'}: {what}")
    return value


def dumps(value: Any) -> str:
    """Compact JSON, refusing NaN and Infinity (``ValueError``) rather than writing them."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@dataclass(slots=True)
class Measure:
    """What ``measure`` found: the value's size (the bytes of its compact JSON in UTF-8, as
    ``dumps`` writes it), its depth, how many objects it holds, and the first problem as
    ``(path, message)`` (``None``: strict JSON within the limits). When a problem stopped
    the walk, ``size`` counts only what was walked."""

    size: int = 0
    depth: int = 0
    objects: int = 0
    problem: tuple[str, str] | None = None


def _path(chain: Any, last: Any = None) -> str:
    parts: list[Any] = []
    if last is not None:
        parts.append(last)
    while chain is not None:
        chain, key = chain
        parts.append(key)
    parts.reverse()
    if len(parts) > _PATH_PARTS:  # a path 5,000 levels deep is named by its start
        parts = [*parts[: _PATH_PARTS - 1], "..."]
    out = ""
    for key in parts:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


_PATH_PARTS = 8
_CONTAINERS = (dict, list, tuple)
#: What ``dumps`` writes as an escape: two bytes (a quote, \n) or six (\u001f).
_ESCAPED = re.compile(r'["\\\x00-\x1f]')
_ESCAPE_CHUNK = 1 << 16  # escape long strings a slice at a time: bounded memory


def _utf8_len(text: str) -> int:
    """UTF-8 bytes of ``text``; -1 if it holds a lone surrogate."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return -1


def _escapes(text: str) -> int:
    """The bytes ``dumps`` adds to ``text`` by escaping it (0 for most text).

    Escapes are per character, so the walk joins a value's strings and escapes them in one
    call (a call a string doubled the walk's cost); a long text goes a slice at a time, so
    that a string of quotes costs no more memory than a slice of six times its size."""
    if len(text) <= _ESCAPE_CHUNK:  # most values: one call, no search before it (slower)
        return len(encode_basestring(text)) - len(text) - 2  # the C escaper dumps uses
    if _ESCAPED.search(text) is None:
        return 0
    extra = 0
    for start in range(0, len(text), _ESCAPE_CHUNK):
        part = text[start : start + _ESCAPE_CHUNK]
        extra += len(encode_basestring(part)) - len(part) - 2
    return extra


def string_size(text: str) -> int:
    """The bytes of ``text`` as a JSON string (quotes, escapes, UTF-8); -1 for a lone
    surrogate."""
    n = len(text) if text.isascii() else _utf8_len(text)
    return n if n < 0 else n + 2 + _escapes(text)


def _string_problem(n: int, max_string: int | None) -> str:
    if n == -2:
        return "nested too deep to read"
    if n < 0:
        return "holds a lone surrogate (not UTF-8)"
    return f"a string of {n} bytes; at most {max_string}"


def _other(item: Any) -> int | str:
    """The size of a scalar that is not a string, or what is wrong with it."""
    kind = type(item)
    if kind is float:
        if math.isfinite(item):
            return len(float.__repr__(item))  # what json writes
        return f"{item!r} is not a JSON number (NaN and Infinity are refused)"
    if kind is int:
        if item.bit_length() > _MAX_INT_BITS:
            return f"an integer of over {MAX_INT_DIGITS} digits"
        return len(int.__repr__(item))
    if item is None or item is True:
        return 4  # null, true
    if item is False:
        return 5
    return f"a {kind.__name__}, not a JSON value"


def measure(
    value: Any,
    *,
    max_depth: int,
    max_bytes: int | None = None,
    max_string: int | None = None,
    path: str = "",
) -> Measure:
    """Walk ``value`` (explicit stack) for strictness, depth, size and string length.

    A value is strict JSON when it holds only dicts with string keys, lists (tuples),
    strings without lone surrogates, finite floats, integers of at most ``MAX_INT_DIGITS``
    digits, booleans and None. The walk stops at the first problem: nested deeper than
    ``max_depth`` (a scalar is 0 deep, ``{"a": 1}`` 1), over ``max_bytes`` in all, or a string
    or key of more than ``max_string`` UTF-8 bytes. Problems are named from ``path``.
    """
    found = Measure()
    limit: float = math.inf if max_bytes is None else max_bytes
    longest: float = math.inf if max_string is None else max_string
    root = None if not path else (None, path)
    if not isinstance(value, _CONTAINERS):
        if type(value) is str:
            n = -2 if value == CLIPPED else _utf8_len(value)
            if 0 <= n <= longest:
                found.size = n + 2 + _escapes(value)
            else:
                found.problem = (path, _string_problem(n, max_string))
        else:
            other = _other(value)
            if type(other) is int:
                found.size = other
            else:
                found.problem = (path, str(other))
        if found.problem is None and found.size > limit:
            found.problem = (path, f"{found.size} bytes of JSON; at most {max_bytes}")
        return found
    # Each entry: (container, its depth, chain); chain = (parent's chain, key) names it.
    stack: list[tuple[Any, int, Any]] = [(value, 1, root)]
    size = 0
    deepest = 0
    objects = 0
    problem: tuple[str, str] | None = None
    texts: list[str] = []  # keys and strings whose escapes are not counted yet
    pending = 0  # their characters
    while stack:
        node, depth, chain = stack.pop()
        if depth > max_depth:
            problem = (_path(chain), f"nested more than {max_depth} levels deep")
            break
        if depth > deepest:
            deepest = depth
        # The brackets, less the separator counted with every item but one (each item's
        # size below includes its comma).
        size += 1 if node else 2
        if isinstance(node, dict):
            objects += 1
            if type(node) is DuplicateKeys:
                names = ", ".join(repr(k)[:40] for k in node.duplicates[:3])
                problem = (_path(chain), f"names a key twice ({names})")
                break
            for key, item in node.items():
                if type(key) is not str:
                    problem = (_path(chain), f"a key {repr(key)[:40]} that is not a string")
                    break
                n = len(key) if key.isascii() else _utf8_len(key)
                if n < 0 or n > longest:
                    problem = (_path(chain), "a key: " + _string_problem(n, max_string))
                    break
                size += n + 4  # "key": and a comma
                texts.append(key)
                pending += n
                if type(item) is str:
                    n = len(item) if item.isascii() else _utf8_len(item)
                    if n == _CLIPPED_LEN and item == CLIPPED:
                        n = -2
                    if n < 0 or n > longest:
                        problem = (_path(chain, key), _string_problem(n, max_string))
                        break
                    size += n + 2
                    texts.append(item)
                    pending += n
                elif item is None or item is True:
                    size += 4
                elif item is False:
                    size += 5
                elif isinstance(item, _CONTAINERS):
                    stack.append((item, depth + 1, (chain, key)))
                else:
                    other = _other(item)
                    if type(other) is not int:
                        problem = (_path(chain, key), str(other))
                        break
                    size += other
        else:
            for index, item in enumerate(node):
                if type(item) is str:
                    n = len(item) if item.isascii() else _utf8_len(item)
                    if n == _CLIPPED_LEN and item == CLIPPED:
                        n = -2
                    if n < 0 or n > longest:
                        problem = (_path(chain, index), _string_problem(n, max_string))
                        break
                    size += n + 3
                    texts.append(item)
                    pending += n
                elif item is None or item is True:
                    size += 5
                elif item is False:
                    size += 6
                elif isinstance(item, _CONTAINERS):
                    size += 1
                    stack.append((item, depth + 1, (chain, index)))
                else:
                    other = _other(item)
                    if type(other) is not int:
                        problem = (_path(chain, index), str(other))
                        break
                    size += other + 1
        if problem is not None:
            break
        if pending > _ESCAPE_CHUNK or not stack:
            size += _escapes("".join(texts))
            texts.clear()
            pending = 0
        if size > limit:
            problem = (path, f"over {max_bytes} bytes of JSON")
            break
    found.size, found.depth, found.objects, found.problem = size, deepest, objects, problem
    return found
