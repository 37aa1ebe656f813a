"""Parts of a secret in a text: twelve or more of its characters standing together.

``shared.scrub`` removes a secret's whole forms (verbatim, encoded, escaped). A key cut by a
character (``key[:-1]``, a provider echoing a truncated key, a handler's ``key[:20]``) or
escaped in parts matched none of them and was shown, nearly all of its bits with it.
``remove_fragments`` removes every stretch of ``FRAGMENT_CHARS`` or more characters that the
text and a secret share (case-folded, as the whole forms are matched).

How, in linear time over the text: each secret is indexed by its windows of ``_STRIDE``
characters at every ``_STRIDE``-th offset (a stretch of ``FRAGMENT_CHARS`` holds one of them
whole, since ``2 * _STRIDE - 1 <= FRAGMENT_CHARS``); one regular expression finds them in the
text, and each hit is grown both ways while text and secret agree. Only a long enough common
stretch goes, so a window that is ordinary text (``sk-or-``) is left. Hand-written: no
library we know matches shared substrings against a few secrets.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

__all__ = ["FRAGMENT_CHARS", "REDACTED", "remove_fragments"]

#: What a removed secret becomes in a text (``shared.scrub`` re-exports it).
REDACTED: Final = "[redacted]"
#: A stretch of this many characters of a secret is a part of it that must not be shown.
FRAGMENT_CHARS: Final = 12
#: Secrets are indexed by windows this long, at every this-many-th offset.
_STRIDE: Final = FRAGMENT_CHARS // 2


@lru_cache(maxsize=64)
def _fragment_index(
    secrets: tuple[str, ...],
) -> tuple[re.Pattern[str] | None, dict[str, list[tuple[str, int]]]]:
    """A pattern of each secret's windows (``_STRIDE`` characters at every ``_STRIDE``-th
    offset, case-folded) and, by window, the (secret, offset) pairs it stands at."""
    where: dict[str, list[tuple[str, int]]] = {}
    for secret in secrets:
        folded = secret.lower()
        if len(folded) < FRAGMENT_CHARS:
            continue
        for offset in range(0, len(folded) - _STRIDE + 1, _STRIDE):
            where.setdefault(folded[offset : offset + _STRIDE], []).append((folded, offset))
    if not where:
        return None, where
    alternation = "|".join(re.escape(w) for w in sorted(where, key=len, reverse=True))
    # A lookahead, so that windows overlapping in the text are all found.
    return re.compile(f"(?=({alternation}))", re.IGNORECASE), where


def remove_fragments(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each stretch of ``FRAGMENT_CHARS`` or more characters of a secret
    replaced by ``REDACTED``. A window of a secret found in the text is grown both ways while
    the text and the secret agree: only a long enough common stretch goes, so a window that
    is ordinary text ("sk-or-") is left."""
    pattern, where = _fragment_index(secrets)
    if pattern is None:
        return text
    folded = text.lower()
    spans: list[tuple[int, int]] = []
    for match in pattern.finditer(folded):
        start = match.start()
        for secret, offset in where[match[1]]:
            left = 0
            while left < offset and left < start and folded[start - left - 1] == secret[
                offset - left - 1
            ]:
                left += 1
            right = _STRIDE
            while (
                offset + right < len(secret)
                and start + right < len(folded)
                and folded[start + right] == secret[offset + right]
            ):
                right += 1
            if left + right >= FRAGMENT_CHARS:
                spans.append((start - left, start + right))
    if not spans:
        return text
    kept, last = [], 0
    for begin, end in _merged(spans):
        kept += [text[last:begin], REDACTED]
        last = end
    kept.append(text[last:])
    return "".join(kept)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged
