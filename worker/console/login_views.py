"""Logging in and out.

A login attempt is refused before any hashing while its account or address must wait
(``LoginThrottle``) and when too many password checks are already running (``Busy``); it is
counted against both before its password is checked, and a failure leaves it counted.
Logging in and out each give the session a new id; logging out deletes it, so a copy of the
cookie is worth nothing afterwards.

Each outcome is a line of the console's log (``login.failed`` at WARNING, ``login.throttled``
and ``login.succeeded`` at INFO, with the login as typed and the client address): without
them an operator could not tell a guessing attack, or an account kept waiting by one, from a
quiet console. A name is an attacker's text: cut, and its control and direction characters
shown as ``<U+XXXX>``; a password is never logged.
"""

from __future__ import annotations

import math

import structlog
from starlette.requests import Request
from starlette.responses import Response

from worker.console.auth import Login
from worker.console.csrf import new_csrf_token
from worker.console.sessions import renew_session
from worker.console.throttle import Busy
from worker.console.web import Form, action, flash, log_in, read_form, redirect, render, state_of

__all__ = ["login_form", "login_submit", "logout", "safe_next"]

log = structlog.get_logger("decisions.console")

#: The most of a typed login name a log line shows.
NAME_SHOWN = 64


def safe_next(target: str | None) -> str:
    """Only a path of this site: never another host (``//evil``, ``/\\evil``, a scheme)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/escalations"
    return target


def login_form(request: Request) -> Response:
    return render(
        request, "login.html", next=safe_next(request.query_params.get("next")), error=None
    )


async def login_submit(request: Request) -> Response:
    form = await read_form(request)
    if form is None:
        return _refused(request, 403, "/escalations", "The form had expired; try again.")
    name, password = form.get("username", ""), form.get("password", "")
    target = safe_next(form.get("next"))
    state = state_of(request)
    address = request.client.host if request.client else "unknown"
    # Counted against the account and the address before the check, in one step with the
    # check that neither must wait: concurrent guesses cannot all slip in before a failure.
    attempt = await state.throttle.begin(name, address)
    wait = attempt.wait_s
    if wait > 0:
        log.info("login.throttled", login=_shown(name), address=address, wait_s=math.ceil(wait))
        return _refused(
            request,
            429,
            target,
            f"Too many failed logins: try again in {math.ceil(wait)} s.",
            retry_after=math.ceil(wait),
        )
    try:
        login = await state.password_checks.run(state.users.authenticate, name, password)
    except Busy:
        await state.throttle.abandoned(attempt)
        return _refused(
            request, 503, target, "Too many logins at once: try again in a moment.", retry_after=2
        )
    if login is None:
        wait = await state.throttle.failed(attempt)
        log.warning("login.failed", login=_shown(name), address=address, wait_s=wait)
        return _refused(request, 401, target, "Wrong name or password.")
    await state.throttle.succeeded(attempt)
    log.info("login.succeeded", login=login.name, role=login.role, address=address)
    request.session.clear()
    renew_session(request)
    log_in(request, login)
    new_csrf_token(request.session)
    return redirect(target)


@action(reviewer=False)
def logout(request: Request, login: Login, form: Form) -> Response:
    request.session.clear()
    renew_session(request)
    flash(request, f"{login.name} logged out")
    return redirect("/login")


def _shown(name: str) -> str:
    """A typed name as a log line may show it: cut, nothing in it that is not printable."""
    cut = name[:NAME_SHOWN]
    shown = "".join(c if c.isprintable() else f"<U+{ord(c):04X}>" for c in cut)
    return shown + ("..." if len(name) > NAME_SHOWN else "")


def _refused(
    request: Request, status: int, target: str, error: str, *, retry_after: int | None = None
) -> Response:
    response = render(request, "login.html", status=status, next=target, error=error)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response
