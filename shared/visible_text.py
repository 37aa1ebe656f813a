"""``visible``: a producer's or a host's text, made safe to show: its controls named.

A job's text (its batch, an escalation's detail, the menu, the model's last reply) reaches
a reviewer's terminal and the console's pages. Left raw, an ESC starts a terminal escape
sequence (it can rewrite what is on the screen, retitle the window, on some terminals write
the clipboard), a carriage return overwrites the line it ends, and a bidirectional-text
control (U+202E reverses what follows) shows other words than the text holds. Each is shown
as its code point (``<U+001B>``) instead. Line feeds and tabs stay: they are how a text is
laid out, and are harmless.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["visible"]

#: C0 but line feed and tab, DEL, C1; bidi embeddings and overrides (U+202A..U+202E) and
#: isolates (U+2066..U+2069).
_SHOWN_AS_CODE_POINTS: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)


def visible(text: str) -> str:
    """``text`` with every control character it holds written as ``<U+XXXX>``."""
    return _SHOWN_AS_CODE_POINTS.sub(lambda found: f"<U+{ord(found.group()):04X}>", text)
