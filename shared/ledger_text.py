"""``LedgerText``: a job field the ledger keeps in a text column, without control characters.

Its own module because both ``shared.jobs`` and ``shared.judgments.specs`` (which
``shared.jobs`` imports) declare such fields.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["LedgerText", "has_control_character", "no_control_characters"]

_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def has_control_character(value: str) -> bool:
    """Whether ``value`` could not be a ``LedgerText`` (a name no job can have)."""
    return _CONTROL_CHARACTER.search(value) is not None


def no_control_characters(value: str) -> str:
    """``value``, or ``ValueError`` naming the first control character it holds."""
    # The ledger keeps the field in a text column (jobs.batch, calls.provider and .model,
    # labels.question_id): PostgreSQL cannot store a NUL there, and the worker's first write
    # of the job failed, losing its terminal message. Any other control character would
    # break the one-line logs and tables that show the field.
    found = _CONTROL_CHARACTER.search(value)
    if found:
        raise ValueError(f"holds a control character ({found.group()!r}); none is allowed")
    return value


#: A job field the ledger keeps in a text column: no control characters (C0, DEL, C1).
LedgerText = Annotated[str, AfterValidator(no_control_characters)]
