"""Security headers on every response.

The pages need no script at all, so the policy forbids every script and inline style: even
a rendering bug that let a job's HTML through would stay inert. Images may be ``data:``
URLs (a state's pictures, rebuilt from checked bytes); forms post only to the console.
Served over HTTPS (``DECISIONS_CONSOLE_HTTPS_ONLY``, or a request that arrived over https),
every response also carries HSTS: browsers then never try the console over plain HTTP.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worker.console.sessions import is_https

__all__ = ["CONTENT_SECURITY_POLICY", "HSTS", "SecurityHeaders", "add_security_headers"]

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

#: A year, this host only: the console may share a domain with sites that are not HTTPS.
HSTS: Final = "max-age=31536000"

_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def add_security_headers(headers: MutableHeaders, scope: Scope, https_only: bool) -> None:
    """Every header above (and HSTS over HTTPS) that ``headers`` does not set already.

    Also called for the server error page, which Starlette answers outside this middleware."""
    for name, value in _HEADERS.items():
        headers.setdefault(name, value)
    if is_https(scope, https_only):
        headers.setdefault("Strict-Transport-Security", HSTS)


class SecurityHeaders:
    def __init__(self, app: ASGIApp, *, https_only: bool = False) -> None:
        self.app = app
        self.https_only = https_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                add_security_headers(MutableHeaders(scope=message), scope, self.https_only)
            await send(message)

        await self.app(scope, receive, send_with_headers)
