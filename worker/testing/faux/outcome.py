"""What the faux does with one request: answer it, or end the connection.

Transport-independent, so the same outcome is played by the asyncio server (bytes on a
socket) and by the in-process transport (an ``httpx.Response`` or the exception real httpx
raises for that connection event).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FauxDrop", "FauxResponse", "Outcome", "json_response"]


@dataclass(frozen=True, slots=True)
class FauxResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class FauxDrop:
    """End the connection without answering.

    ``read``: the request was read first (so it was counted); ``reset``: end with an RST
    (SO_LINGER 0) instead of an orderly close.
    """

    read: bool
    reset: bool = False


Outcome = FauxResponse | FauxDrop


def json_response(
    status: int, payload: Any, headers: dict[str, str] | None = None
) -> FauxResponse:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    out = {"content-type": "application/json"}
    if headers:
        out.update(headers)
    return FauxResponse(status, out, body)
