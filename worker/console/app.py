"""``create_app``: the reviewer console as a Starlette application.

It reads the same Redis streams (through ``EscalationQueue``) and the same ledger as the
command line, built from the same settings. Sessions live in Redis (``sessions``): the
cookie is a random id, ``SameSite=Strict``, HTTP-only, and ``Secure`` over HTTPS; logins are
throttled (``throttle``). The pages are Jinja2 templates with autoescaping on, and the static
files are the package's own.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from shared.escalations import EscalationQueue
from shared.redis_connect import CONNECT_TIMEOUT_S, redis_client
from shared.resolutions import MenuAnswerChecker
from shared.settings import Settings
from worker.console import batch_views, calibration_views, escalation_views, login_views
from worker.console.auth import Users
from worker.console.estimates import EstimateSource, StoredEstimates
from worker.console.filters import install_filters, shown_text
from worker.console.headers import SecurityHeaders, add_security_headers
from worker.console.sessions import RedisSessions
from worker.console.throttle import LoginThrottle, PasswordChecks
from worker.console.web import USER_KEY, ConsoleState, FormRefused, redirect, render
from worker.ledger import Ledger

__all__ = ["create_app", "menu_checker", "templates"]

SESSION_COOKIE = "decisions_console"
_log = logging.getLogger(__name__)
_MAX_BODY_BYTES = 1024 * 1024


def menu_checker() -> MenuAnswerChecker | None:
    """The menu engine's answer check, once it is installed (imported late: it is optional)."""
    try:
        from worker.kinds.menus.resolution import check_menu_answer
    except ImportError:
        return None
    checker: MenuAnswerChecker = check_menu_answer
    return checker


def templates() -> Environment:
    env = Environment(
        loader=PackageLoader("worker.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown_text,
    )
    install_filters(env)
    return env


def create_app(
    settings: Settings,
    *,
    queue: EscalationQueue | None = None,
    ledger: Ledger | None = None,
    estimates: EstimateSource | None = None,
) -> Starlette:
    if queue is None:
        queue = EscalationQueue(
            redis_client(settings.redis_url),
            claim_idle_s=settings.escalation_claim_idle_s,
            marker_ttl_s=settings.publish_marker_ttl_s,
            menu_checker=menu_checker(),
        )
    sessions_redis = aioredis.Redis.from_url(
        settings.redis_url, socket_connect_timeout=CONNECT_TIMEOUT_S
    )
    state = ConsoleState(
        queue=queue,
        ledger=ledger or Ledger.from_settings(settings),
        users=Users(settings.console_users, settings.console_users_file),
        estimates=estimates or StoredEstimates(queue.redis),
        templates=templates(),
        throttle=LoginThrottle(
            sessions_redis,
            free_failures=settings.console_login_free_failures,
            max_wait_s=settings.console_login_lockout_max_s,
        ),
        password_checks=PasswordChecks(settings.console_password_checks),
    )
    app = Starlette(
        routes=_routes(),
        middleware=[
            Middleware(SecurityHeaders, https_only=settings.console_https_only),
            Middleware(
                RedisSessions,
                client=sessions_redis,
                cookie=SESSION_COOKIE,
                max_age_s=settings.console_session_max_age_s,
                https_only=settings.console_https_only,
                login_key=USER_KEY,
            ),
        ],
        exception_handlers={
            HTTPException: _http_error,
            redis.RedisError: _redis_error,
            Exception: _server_error,
        },
        max_body_size=_MAX_BODY_BYTES,
    )
    app.state.console = state
    app.state.https_only = settings.console_https_only
    return app


def _routes() -> list[Route | Mount]:
    static = Path(__file__).with_name("static")
    return [
        Route("/", lambda request: redirect("/escalations")),
        Route("/healthz", lambda request: PlainTextResponse("ok")),
        Route("/login", login_views.login_form, methods=["GET"]),
        Route("/login", login_views.login_submit, methods=["POST"]),
        Route("/logout", login_views.logout, methods=["POST"]),
        Route("/escalations", escalation_views.escalation_list, methods=["GET"]),
        Route("/escalations/{entry_id}", escalation_views.escalation_detail, methods=["GET"]),
        Route("/escalations/{entry_id}/claim", escalation_views.claim, methods=["POST"]),
        Route("/escalations/{entry_id}/resolve", escalation_views.resolve, methods=["POST"]),
        Route("/escalations/{entry_id}/release", escalation_views.release, methods=["POST"]),
        Route("/batches", batch_views.batch_list, methods=["GET"]),
        Route("/batches/view", batch_views.batch_detail, methods=["GET"]),
        Route("/calibration", calibration_views.calibration_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]


async def _http_error(request: Request, exc: Any) -> Response:
    status = getattr(exc, "status_code", 500)
    titles = {400: "Not read", 404: "Not found", 405: "Not allowed", 413: "Too large"}
    # Only the console's own refusals say why: another exception's detail is not ours to show.
    why = exc.detail if isinstance(exc, FormRefused) else ""
    return _plain_page(request, status, titles.get(status, "Error"), why)


async def _redis_error(request: Request, exc: Exception) -> Response:
    """Redis out of reach, or answering an error (a key holding another kind of value): said
    on the page in one line, as the CLI says it (found by an attack: a bare 500)."""
    if isinstance(exc, redis.ResponseError):
        # Redis's own words name the command's trouble, never a job's data or a password.
        message = f"Redis answered an error: {str(exc)[:200]}"
    else:
        message = f"Redis cannot be reached right now ({type(exc).__name__})."
    _log.warning("console redis error on %s: %s", request.url.path, message)
    return _error_page(request, 503, "Redis unavailable", message)


async def _server_error(request: Request, exc: Exception) -> Response:
    # No traceback or message on the page: it could quote a job's data or a setting.
    _log.error("console error on %s: %s", request.url.path, type(exc).__name__, exc_info=exc)
    return _error_page(request, 500, "Something went wrong", "The error was logged.")


def _error_page(request: Request, status: int, title: str, message: str) -> Response:
    response = _plain_page(request, status, title, message)
    # Starlette sends this page from outside every middleware: the headers are added here.
    https_only = bool(getattr(request.app.state, "https_only", False))
    add_security_headers(response.headers, request.scope, https_only)
    return response


def _plain_page(request: Request, status: int, title: str, message: str) -> Response:
    try:
        return render(request, "error.html", status=status, title=title, message=message)
    except Exception:  # the session or templates themselves failed: plain text then
        return HTMLResponse(title, status_code=status)
