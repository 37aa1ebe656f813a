"""How a call's row names the budgets it reserved against: one text column, a token a scope.

A call reserves against up to two budgets (its batch's, ``batch:NAME``, and its provider's
daily ceiling, ``day:PROVIDER:DATE``), kept in ``calls.budget_scopes`` as tokens separated by
single spaces: read back when the call settles, matched (``LIKE '% token %'``) when a
budget's figures are counted, and appended to when a budget made later brings a call in
flight under it. A batch name is the producer's text and may hold spaces, so a scope is
written as a token no name can break: ``%`` and every whitespace character percent-encoded
(UTF-8), nothing else, so that the usual names read as they are. Found by an attack: the
scopes were joined by spaces as they were and split on whitespace, so a call of batch
``victim x`` settled into batch ``victim``'s budget, and ``z day:PROVIDER:DATE`` into a
provider's daily ceiling (their $0 answers gave back what other calls had reserved: a $1
budget spent $3).

Rows written before this encoding hold their scopes as they were: a name without ``%`` or
whitespace reads the same either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, unquote

__all__ = ["SEPARATOR", "scope_token", "scopes_of", "scopes_text"]

#: Between two tokens in ``calls.budget_scopes`` (and around one, to match it whole).
SEPARATOR: Final = " "
_ESCAPED: Final = re.compile(r"[%\s]")


def scope_token(scope: str) -> str:
    """``scope`` as it is written in a call's row: no space, no other whitespace."""
    return _ESCAPED.sub(lambda found: quote(found.group(), safe=""), scope)


def scopes_text(scopes: Iterable[str]) -> str:
    """The column's text for ``scopes``."""
    return SEPARATOR.join(scope_token(scope) for scope in scopes)


def scopes_of(text: str) -> tuple[str, ...]:
    """The scopes a call's column names (``scopes_text`` read back)."""
    return tuple(unquote(token) for token in text.split(SEPARATOR) if token)
