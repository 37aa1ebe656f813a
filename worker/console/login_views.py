"""Logging in and out."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from worker.console.auth import Login
from worker.console.csrf import new_csrf_token
from worker.console.web import Form, action, flash, log_in, read_form, redirect, render, state_of

__all__ = ["login_form", "login_submit", "logout"]


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
        return render(
            request,
            "login.html",
            status=403,
            next="/escalations",
            error="The form had expired; try again.",
        )
    name, password = form.get("username", ""), form.get("password", "")
    # Argon2 takes tens of milliseconds of CPU on purpose: not on the event loop.
    login = await run_in_threadpool(state_of(request).users.authenticate, name, password)
    target = safe_next(form.get("next"))
    if login is None:
        return render(
            request, "login.html", status=401, next=target, error="Wrong name or password."
        )
    request.session.clear()
    log_in(request, login)
    new_csrf_token(request.session)
    return redirect(target)


@action(reviewer=False)
def logout(request: Request, login: Login, form: Form) -> Response:
    request.session.clear()
    flash(request, f"{login.name} logged out")
    return redirect("/login")
