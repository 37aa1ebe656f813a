"""Strict JSON at every entrance: what a job may be made of, and what it weighs.

``measure`` walks a value with an explicit stack (never recursion: a hostile value may be
thousands of levels deep) and reports the first thing that is not strict JSON, or that
breaks the depth, size or string limits it is given, with its path (``state.a[3]``),
together with the value's size: the exact bytes of its compact JSON in UTF-8
(``shared.strict_json.dumps``), escapes, digits and separators included, so that a size
limit holds to the byte. A size estimated per value (every number 8 bytes, every character
one) let a string of control characters pass its limit six times over. ``shared.limits``
applies it to each field.

Apart from the reader (``shared.strict_json``) because it checks values, not texts: values
the reader marked (``DuplicateKeys``, non-finite floats, ``CLIPPED``) and values built in
Python (a job a ``Client`` is handed, a decoded task body) alike. It reads nothing itself.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, Final

from shared.strict_json import CLIPPED, DuplicateKeys

__all__ = ["MAX_INT_DIGITS", "Measure", "measure", "string_size"]

#: Integers with more digits than this are refused: many readers hold numbers as doubles,
#: and Python refuses to print one of over 4,300 digits (json.dumps raises).
MAX_INT_DIGITS: Final = 100
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219)  # log2(10): bits of a 100-digit number
_CLIPPED_LEN = len(CLIPPED)


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
