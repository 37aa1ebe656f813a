"""The plumbing every page shares: the console's resources, login, rendering, form posts.

``page`` guards a GET: a visitor without a login is sent to it. ``action`` guards a POST:
it reads the (urlencoded, file-less, bounded) form, refuses it with 403 unless its CSRF
token matches the session's, checks the login and role, and runs the handler in a thread,
because the queue and the ledger are blocking clients. A form is bounded in fields by what
the console's forms can hold (a reviewer's: a menu's every input; anyone else's: a login
form's few); one over its bound is refused unread (``FormRefused``), saying so in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from jinja2 import Environment
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from shared.escalations import EscalationQueue
from shared.limits import MAX_MENU_OPTIONS, MAX_SCHEMA_FIELDS
from worker.console.auth import Login, Users
from worker.console.csrf import CSRF_FIELD, PageToken, csrf_ok
from worker.console.estimates import EstimateSource
from worker.console.throttle import LoginThrottle, PasswordChecks
from worker.ledger import Ledger

__all__ = [
    "USER_KEY",
    "ConsoleState",
    "Form",
    "FormRefused",
    "action",
    "flash",
    "forbidden",
    "log_in",
    "login_of",
    "page",
    "read_form",
    "redirect",
    "render",
    "state_of",
]

Form = Mapping[str, str]
Handler = Callable[[Request, Login, Form], Response]
Endpoint = Callable[[Request], Awaitable[Response]]
#: The fields a reviewer's form can hold: a menu's form posts every option's inputs (up to
#: one per field of its schema) and JSON box at once, and a few fields of its own. A decide
#: form holds a page of questions (``decide_form.PAGE_SIZE``), far fewer.
_REVIEWER_FIELDS: Final = MAX_MENU_OPTIONS * (MAX_SCHEMA_FIELDS + 1) + 16
#: Anyone else's post is read only this far (a login form has four fields): reading a 1 MiB
#: body of 250,000 fields costs a third of a second, before its token is even checked.
_FEW_FIELDS: Final = 64
#: The session key of the logged-in name (``RedisSessions`` gives such sessions their age).
USER_KEY: Final = "user"
_STAMP_KEY: Final = "stamp"
_FLASH_KEY: Final = "flash"


@dataclass(frozen=True)
class ConsoleState:
    queue: EscalationQueue
    ledger: Ledger
    users: Users
    estimates: EstimateSource
    templates: Environment
    throttle: LoginThrottle
    password_checks: PasswordChecks


def state_of(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


def login_of(request: Request) -> Login | None:
    """The session's user, with the role settings give them now. A user removed, or whose
    password changed since this session logged in, has none."""
    name = request.session.get(USER_KEY)
    if not isinstance(name, str):
        return None
    users = state_of(request).users
    role = users.role_of(name)
    if role is None or users.stamp_of(name) != request.session.get(_STAMP_KEY):
        return None
    return Login(name, role)


def log_in(request: Request, login: Login) -> None:
    request.session[USER_KEY] = login.name
    request.session[_STAMP_KEY] = state_of(request).users.stamp_of(login.name)


def flash(request: Request, text: str) -> None:
    request.session[_FLASH_KEY] = [*request.session.get(_FLASH_KEY, []), text][-5:]


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def render(request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    env = state_of(request).templates
    flashes = request.session.pop(_FLASH_KEY, [])
    html = env.get_template(template).render(
        login=login_of(request),
        csrf_field=CSRF_FIELD,
        csrf_token=PageToken(request.session),
        flashes=flashes,
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return redirect(f"/login?next={quote(target, safe='')}")


def page(
    handler: Callable[[Request, Login], Response],
) -> Callable[[Request], Response]:
    @functools.wraps(handler)
    def endpoint(request: Request) -> Response:
        login = login_of(request)
        if login is None:
            return _to_login(request)
        return handler(request, login)

    return endpoint


def action(*, reviewer: bool = True) -> Callable[[Handler], Endpoint]:
    """A POST that needs a login (and the reviewer role unless ``reviewer=False``)."""

    def wrap(handler: Handler) -> Endpoint:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            login = login_of(request)
            bound = _REVIEWER_FIELDS if login is not None and login.can_review else _FEW_FIELDS
            form = await read_form(request, max_fields=bound)
            if form is None:
                return forbidden(request, "the form's security token is missing or stale")
            if login is None:
                return _to_login(request)
            if reviewer and not login.can_review:
                return forbidden(request, "your login is read-only")
            return await run_in_threadpool(handler, request, login, form)

        return endpoint

    return wrap


class FormRefused(HTTPException):
    """A post whose form was not read (more fields than allowed, a malformed body): a 400
    whose ``detail`` is one line for the page."""


async def read_form(request: Request, *, max_fields: int = _FEW_FIELDS) -> Form | None:
    """The form's fields, or None unless it carries the session's CSRF token (and no file);
    ``FormRefused`` if it has more than ``max_fields`` fields or cannot be read."""
    try:
        async with request.form(max_files=0, max_fields=max_fields) as data:
            fields: dict[str, str] = {}
            for key, value in data.multi_items():
                if isinstance(value, UploadFile):
                    return None
                fields.setdefault(key, value)
    except HTTPException as exc:
        if exc.status_code != 400:  # a body over its size (413) is answered as such
            raise
        # Starlette refuses with a bare 400: the page says which bound, and that nothing was done.
        why = (
            f"it has more than {max_fields:,} fields, more than any form of the console holds"
            if str(exc.detail).startswith("Too many fields")
            else str(exc.detail).rstrip(".")
        )
        raise FormRefused(400, f"The form was not read: {why}. Nothing was done.") from None
    if not csrf_ok(request.session, fields.get(CSRF_FIELD)):
        return None
    return fields


def forbidden(request: Request, why: str) -> HTMLResponse:
    return render(request, "error.html", status=403, title="Not allowed", message=why)
