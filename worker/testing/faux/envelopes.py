"""Error bodies in each API's documented envelope.

TypeSafe ``{"detail": {...}}`` (full schema unconfirmed: ``error_type`` and ``message``),
OpenRouter ``{"error": {"code", "message", "metadata"}}`` with status = code, Parallel
``{"type": "error", "error": {"message", "ref_id", "detail"?}}``, OpenAI
``{"error": {"message", "type", "param", "code"}}``. No envelope echoes a header or a key.
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from .wire import Flavour

__all__ = ["error_body", "error_message"]

_MESSAGES: Final = {
    400: "bad request",
    401: "invalid or missing API key",
    402: "insufficient credits",
    403: "forbidden",
    404: "not found",
    408: "request timed out",
    413: "request body too large",
    422: "validation error",
    429: "rate limit exceeded",
    500: "internal server error",
    502: "bad gateway",
    503: "service unavailable",
    504: "gateway timeout",
    529: "overloaded",
}

_TYPESAFE_ERROR_TYPES: Final = {
    400: "invalid_request",
    401: "authentication_error",
    403: "permission_denied",
    413: "request_too_large",
    422: "validation_error",
    429: "rate_limit_exceeded",
    529: "overloaded",
}

_OPENAI_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def error_message(status: int) -> str:
    return _MESSAGES.get(status, f"faux error {status}")


def error_body(
    flavour: Flavour,
    status: int,
    message: str | None = None,
    *,
    loc: tuple[str | int, ...] | None = None,
) -> dict[str, Any]:
    """The body a host of ``flavour`` sends with ``status``; ``loc`` locates a bad field."""
    text = message or error_message(status)
    if flavour == "typesafe":
        detail: dict[str, Any] = {
            "error_type": _TYPESAFE_ERROR_TYPES.get(status, "server_error"),
            "message": text,
        }
        if loc is not None:
            detail["loc"] = list(loc)
        return {"detail": detail}
    if flavour == "openrouter":
        metadata: dict[str, Any] = {"loc": list(loc)} if loc is not None else {}
        return {"error": {"code": status, "message": text, "metadata": metadata}}
    if flavour == "parallel":
        error: dict[str, Any] = {"message": text, "ref_id": f"ref_{secrets.token_hex(8)}"}
        if loc is not None:
            error["detail"] = {"loc": list(loc)}
        return {"type": "error", "error": error}
    param = ".".join(str(part) for part in loc) if loc else None
    return {
        "error": {
            "message": text,
            "type": _OPENAI_ERROR_TYPES.get(status, "server_error"),
            "param": param,
            "code": None,
        }
    }
