"""Server-side sessions in Redis: the cookie carries only a random id.

A signed cookie cannot be taken back: a copy replayed after logout stays valid until it
expires. Here the session lives in Redis under the SHA-256 of its id (so whoever reads Redis
still cannot forge a cookie), logging out deletes it, and ``renew_session`` gives a new id
at login and logout (a session id seen before logging in is worth nothing after). A logged-in
session expires ``max_age_s`` after the login whatever it does; one without a login (the
login form's CSRF token, a flash) after ``ANONYMOUS_TTL_S``.

Starlette's ``Session`` dict is reused so ``request.session`` works as with its middleware.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any, Final

import redis.asyncio as aioredis
from starlette.datastructures import MutableHeaders
from starlette.middleware.sessions import Session
from starlette.requests import HTTPConnection, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import keys

__all__ = ["ANONYMOUS_TTL_S", "RedisSessions", "is_https", "renew_session"]

#: A session without a login (only a form token, a message) lasts this long.
ANONYMOUS_TTL_S: Final = 1800
_RENEW: Final = "decisions.session_renew"
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")


def renew_session(request: Request) -> None:
    """Drop the session's id for a new one when the response goes out (login, logout)."""
    request.scope[_RENEW] = True


def is_https(scope: Scope, https_only: bool) -> bool:
    """Whether cookies must be ``Secure`` (and HSTS sent): the setting, or an https request."""
    return https_only or scope.get("scheme") == "https"


def _key(session_id: str) -> str:
    return keys.console_session(hashlib.sha256(session_id.encode()).hexdigest())


class RedisSessions:
    def __init__(
        self,
        app: ASGIApp,
        *,
        client: aioredis.Redis,
        cookie: str,
        max_age_s: int,
        https_only: bool,
        login_key: str,
    ) -> None:
        self.app = app
        self.client = client
        self.cookie = cookie
        self.max_age_s = max_age_s
        self.https_only = https_only
        #: A session holding this key is logged in (and lives ``max_age_s``).
        self.login_key = login_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session_id = HTTPConnection(scope).cookies.get(self.cookie)
        loaded: dict[str, Any] | None = None
        if session_id and _SESSION_ID.match(session_id):
            loaded = await self._load(session_id)
        if loaded is None:
            session_id = None
        session = Session(loaded or {})
        scope["session"] = session

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if session.accessed:
                    headers.add_vary_header("Cookie")
                cookie = await self._save(scope, session, session_id)
                if cookie is not None:
                    headers.append("Set-Cookie", cookie)
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    async def _load(self, session_id: str) -> dict[str, Any] | None:
        raw = await self.client.get(_key(session_id))
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def _save(self, scope: Scope, session: Session, session_id: str | None) -> str | None:
        """Write the session back; the Set-Cookie header to send, if any."""
        renew = bool(scope.get(_RENEW))
        if not session.modified and not renew:
            return None
        if session_id is not None and (renew or not session):
            await self.client.delete(_key(session_id))
        if not session:
            return self._cookie(scope, "", 0) if session_id is not None else None
        body = json.dumps(dict(session), separators=(",", ":"))
        if session_id is not None and not renew:
            # Same id: the expiry set when it was made stands (a login lasts max_age_s).
            # XX: a session that expired meanwhile is not brought back without an expiry.
            await self.client.set(_key(session_id), body, keepttl=True, xx=True)
            return None
        new_id = secrets.token_urlsafe(32)
        ttl = self.max_age_s if self.login_key in session else ANONYMOUS_TTL_S
        await self.client.set(_key(new_id), body, ex=ttl)
        return self._cookie(scope, new_id, ttl)

    def _cookie(self, scope: Scope, value: str, max_age: int) -> str:
        flags = "; Secure" if is_https(scope, self.https_only) else ""
        return f"{self.cookie}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{flags}"
