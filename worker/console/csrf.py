"""CSRF: one random token per session, echoed by every form and compared in constant time.

The session cookie holds only a random id (the session itself is in Redis:
``worker.console.sessions``) and is ``SameSite=Strict``; the token is what makes a forged
cross-site POST fail even where a browser would send the cookie.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import MutableMapping
from typing import Any, Final

__all__ = ["CSRF_FIELD", "PageToken", "csrf_ok", "csrf_token", "new_csrf_token"]

#: The hidden field every form carries.
CSRF_FIELD: Final = "csrf_token"
_SESSION_KEY: Final = "csrf"


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's token, made on first use."""
    token = session.get(_SESSION_KEY)
    if not isinstance(token, str) or not token:
        token = new_csrf_token(session)
    return token


class PageToken:
    """The session's token as a page prints it: made only when a template prints it.

    Making it stores a session (in Redis, with a cookie). Made for every page, each 404 or
    error page shown to an anonymous visitor stored one: a stream of requests filled Redis
    with sessions nobody would use. Only a page with a form (login's) needs one.
    """

    def __init__(self, session: MutableMapping[str, Any]) -> None:
        self._session = session

    def __str__(self) -> str:
        return csrf_token(self._session)

    def __html__(self) -> str:
        return str(self)  # URL-safe base64: nothing in it to escape


def new_csrf_token(session: MutableMapping[str, Any]) -> str:
    """A fresh token (at login, so a token seen before logging in is worth nothing after)."""
    token = secrets.token_urlsafe(32)
    session[_SESSION_KEY] = token
    return token


def csrf_ok(session: MutableMapping[str, Any], submitted: object) -> bool:
    expected = session.get(_SESSION_KEY)
    if not isinstance(expected, str) or not expected or not isinstance(submitted, str):
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode())
