"""Reading a request the faux receives: its JSON, its flavour, its call key, its auth, and
what it is admitted as before its body is read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from worker.testing.faux import wire
from worker.testing.faux.behaviour import FauxBehaviour, FauxMode
from worker.testing.faux.chat import CHAT_PATHS
from worker.testing.faux.responses import openai_question_id

__all__ = [
    "NO_JSON",
    "SYSTEM_ONE_FLAVOURS",
    "Admission",
    "authorised",
    "call_key_of",
    "decisions_flavour",
    "is_decision",
    "parse_body",
    "question_ids",
    "retry_after",
]

SYSTEM_ONE_FLAVOURS: Final[dict[str, wire.Flavour]] = {
    wire.PATH_SYSTEM_ONE: "typesafe",
    wire.PATH_OPENROUTER_SYSTEM_ONE: "openrouter",
}

NO_JSON: Final = object()

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return NO_JSON


def retry_after(seconds: float) -> str:
    # Whole seconds as HTTP says; a fraction is kept (not rounded up) so tests can wait less
    # than a second; clients that only take integers should be given integers.
    return str(int(seconds)) if seconds == int(seconds) else f"{seconds:g}"


def authorised(flavour: wire.Flavour, headers: Mapping[str, str]) -> bool:
    scheme, _, key = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and key.strip():
        return True
    return flavour == "parallel" and bool(headers.get(wire.API_KEY_HEADER, "").strip())


def decisions_flavour(parsed: Any) -> wire.Flavour:
    if isinstance(parsed, dict) and (
        isinstance(parsed.get("questions"), list) or ("input" in parsed and "state" not in parsed)
    ):
        return "openai"
    return "parallel"


def question_ids(flavour: wire.Flavour, body: Mapping[str, Any]) -> list[str]:
    if flavour == "openai":
        return [openai_question_id(q, i) for i, q in enumerate(body["questions"])]
    return list(body["questions"])


@dataclass(frozen=True, slots=True)
class Admission:
    """What a decision request gets, decided once its head is in (before its body)."""

    behaviour: FauxBehaviour
    #: ``behaviour.mode``, or ``ok`` once ``fail_first`` is spent.
    mode: FauxMode
    call_key: str | None

    @property
    def dropped(self) -> bool:
        """Close the connection now, without reading the body (and without counting)."""
        return self.mode == "drop_before_read"


def call_key_of(headers: Mapping[str, str]) -> str | None:
    call_key = headers.get(wire.CALL_KEY_HEADER)
    if call_key is not None and "%" in call_key:
        # Providers percent-encode what is not printable ASCII (and "%" itself).
        return unquote(call_key)
    return call_key


def is_decision(method: str, path: str) -> bool:
    return method.upper() == "POST" and (
        path in SYSTEM_ONE_FLAVOURS or path == wire.PATH_DECISIONS or path in CHAT_PATHS
    )
