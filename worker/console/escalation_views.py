"""The escalations pages: the open list, one escalation (claimed on opening), its answer.

Every move goes through ``EscalationQueue``: ``claim_entry`` when a reviewer opens one,
``resolve`` (which checks the answer with the same code as the command line and publishes
the resolution) and ``release``. A refused answer comes back as the page again, each
problem next to its field, with what the reviewer had entered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final, get_args

from starlette.requests import Request
from starlette.responses import Response

from shared.errors import EscalationNotFound, FieldProblem, ResolutionInvalid
from shared.escalations import OpenEscalation
from shared.replies import EscalationReason
from worker.console.auth import Login
from worker.console.decide_form import decide_answer, decide_fields
from worker.console.menu_form import MenuChoice, menu_answer, menu_choices
from worker.console.state_view import pretty_json, state_images
from worker.console.web import Form, action, flash, page, redirect, render, state_of

__all__ = ["claim", "escalation_detail", "escalation_list", "release", "resolve"]

REASONS: Final[tuple[str, ...]] = get_args(EscalationReason)
_ENTRY_ID: Final = re.compile(r"^\d{1,20}-\d{1,20}$")


@page
def escalation_list(request: Request, login: Login) -> Response:
    reason = request.query_params.get("reason") or None
    batch = request.query_params.get("batch") or None
    if reason is not None and reason not in REASONS:
        reason = None
    queue = state_of(request).queue
    items = queue.open(reason=reason, batch=batch)
    return render(
        request,
        "escalations.html",
        items=items,
        reason=reason,
        batch=batch,
        reasons=REASONS,
        claim_idle_s=queue.claim_idle_ms / 1000,
    )


@action()
def claim(request: Request, login: Login, form: Form) -> Response:
    entry_id = _entry_id(request)
    if entry_id is None:
        return _not_found(request)
    try:
        state_of(request).queue.claim_entry(entry_id, login.name)
    except EscalationNotFound as exc:
        flash(request, str(exc))
    return redirect(f"/escalations/{entry_id}")


@page
def escalation_detail(request: Request, login: Login) -> Response:
    item = _open(request)
    if item is None:
        return _not_found(request)
    return _detail(request, login, item)


@action()
def resolve(request: Request, login: Login, form: Form) -> Response:
    item = _open(request)
    if item is None:
        flash(request, "that escalation is no longer open")
        return redirect("/escalations")
    answer: Any
    if item.message.kind == "menu":
        answer, problems = menu_answer(menu_choices(item.message), form)
        if problems:
            return _detail(request, login, item, form=form, problems=problems, status=422)
    else:
        answer = decide_answer(decide_fields(item.message), form)
    try:
        resolution = state_of(request).queue.resolve(item.entry_id, login.name, answer)
    except ResolutionInvalid as exc:
        return _detail(request, login, item, form=form, problems=exc.problems, status=422)
    except EscalationNotFound as exc:
        flash(request, str(exc))
        return redirect(f"/escalations/{item.entry_id}")
    flash(
        request,
        f"resolved {resolution.job_id}: {json.dumps(resolution.answer, ensure_ascii=False)}",
    )
    return redirect("/escalations")


@action()
def release(request: Request, login: Login, form: Form) -> Response:
    entry_id = _entry_id(request)
    if entry_id is None:
        return _not_found(request)
    try:
        state_of(request).queue.release(entry_id, login.name)
    except EscalationNotFound as exc:
        flash(request, str(exc))
        return redirect(f"/escalations/{entry_id}")
    flash(request, f"released {entry_id} to the queue")
    return redirect("/escalations")


def _detail(
    request: Request,
    login: Login,
    item: OpenEscalation,
    *,
    form: Form | None = None,
    problems: Iterable[FieldProblem] = (),
    status: int = 200,
) -> Response:
    message = item.message
    queue = state_of(request).queue
    idle_s = queue.claim_idle_ms / 1000
    context = message.context
    menu = menu_choices(message) if message.kind == "menu" else None
    fields = decide_fields(message) if message.kind != "menu" else []
    keys = {f.problem_key for f in fields} | _menu_keys(menu)
    by_field: dict[str, list[str]] = {}
    general: list[str] = []
    for problem in problems:
        key = _attach(problem.field, keys, menu, (form or {}).get("call"))
        if key is None:
            general.append(f"{problem.field}: {problem.message}")
        else:
            by_field.setdefault(key, []).append(problem.message)
    state = context.get("state")
    return render(
        request,
        "escalation.html",
        status=status,
        item=item,
        message=message,
        mine=login.can_review and item.holder == login.name,
        claimable=login.can_review
        and item.holder != login.name
        and (item.holder is None or item.idle_s >= idle_s),
        claim_idle_s=idle_s,
        fields=fields,
        menu=menu,
        has_state="state" in context,
        state_json=pretty_json(state),
        images=state_images(state, context.get("assets")),
        answers_json={k: v.model_dump(mode="json") for k, v in (message.answers or {}).items()},
        receipts=message.receipts,
        metadata_json=pretty_json(message.metadata) if message.metadata else None,
        form=form or {},
        errors=by_field,
        general_errors=general,
    )


def _menu_keys(menu: list[MenuChoice] | None) -> set[str]:
    keys: set[str] = {"call", "pick_json"}
    for choice in menu or []:
        keys.update(i.name for i in choice.inputs)
        if choice.args_name:
            keys.add(choice.args_name)
    return keys


def _attach(
    field: str, keys: set[str], menu: list[MenuChoice] | None, chosen: str | None
) -> str | None:
    """The form field a problem belongs next to, or None for the form's top."""
    if field in keys:
        return field
    if field == "answer.call":
        return "call"
    # The menu engine names a payload field answer.args.<field>[...]: the input of <field>.
    top = re.split(r"[.\[]", field.removeprefix("answer.args."), maxsplit=1)[0]
    for choice in menu or []:
        if choice.name != chosen or not field.startswith("answer.args."):
            continue
        for item in choice.inputs:
            if item.field == top:
                return item.name
        if choice.args_name:
            return choice.args_name
    return None


def _entry_id(request: Request) -> str | None:
    entry_id = str(request.path_params.get("entry_id", ""))
    return entry_id if _ENTRY_ID.match(entry_id) else None


def _open(request: Request) -> OpenEscalation | None:
    entry_id = _entry_id(request)
    if entry_id is None:
        return None
    try:
        return state_of(request).queue.get(entry_id)
    except EscalationNotFound:
        return None


def _not_found(request: Request) -> Response:
    return render(
        request,
        "error.html",
        status=404,
        title="Not open",
        message="No open escalation has that id: it may have been resolved.",
    )
