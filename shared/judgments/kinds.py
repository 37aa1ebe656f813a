"""Which raw jobs are judgments: a worker routes them before validating (a bad one is then
rejected by the judgment path, which names its fields as any other path does)."""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["JUDGMENT_KINDS", "wants_verification"]

#: Job kinds that are judgments of their own (a verified decide job is one too).
JUDGMENT_KINDS: Final = frozenset({"sift", "route"})


def wants_verification(raw: Any) -> bool:
    """Whether a raw decide job asks for ``verify`` (not validated here)."""
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return False
    if not isinstance(raw, dict):
        return False
    return raw.get("kind", "decide") == "decide" and raw.get("verify") is not None
