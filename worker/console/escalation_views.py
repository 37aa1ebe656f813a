"""The escalations pages: the open list, one escalation (claimed on opening), its answer.

Every move goes through ``EscalationQueue``: ``claim_entry`` when a reviewer opens one,
``resolve`` (which checks the answer with the same code as the command line and publishes
the resolution) and ``release``; the queue writes each to the audit log (``shared.audit``).
A refused answer comes back as the page again, each problem next to its field, with what the
reviewer had entered; a resolution Redis would not publish (``PublishFailed``: nothing was
written) is named on the page, and the escalation stays the reviewer's. Pages are read
through ``listing``: an entry that does not parse is named, not an error. A big escalation
is shown a page of questions at a time (``decide_form.paged``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from json import JSONDecodeError
from typing import Any, Final, get_args

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from shared.errors import EscalationNotFound, FieldProblem, PublishFailed, ResolutionInvalid
from shared.escalation_entries import is_entry_id
from shared.escalation_listing import find_open, list_open
from shared.escalations import OpenEscalation
from shared.replies import EscalationReason
from worker.console.auth import Login
from worker.console.decide_form import (
    BULK_CHOICES,
    BULK_FIELD,
    DecideField,
    decide_answer,
    decide_fields,
    paged,
    uses_bulk,
)
from worker.console.menu_form import MenuChoice, menu_answer, menu_choices
from worker.console.state_view import pretty_json, state_images
from worker.console.web import Form, action, flash, page, redirect, render, state_of

__all__ = ["UNREADABLE", "claim", "escalation_detail", "escalation_list", "release", "resolve"]

REASONS: Final[tuple[str, ...]] = get_args(EscalationReason)
#: What a queue that cannot skip an unreadable entry raises reading it (an older
#: ``EscalationQueue`` reads every open entry before a move): a message, never a 500.
UNREADABLE: Final = (ValidationError, KeyError, JSONDecodeError)
_BLOCKED: Final = (
    "not done: the queue holds an entry that cannot be read (named on the list); "
    "remove it or upgrade, then try again"
)
#: Problems off the page shown are counted, and this many named.
_NAMED_OFF_PAGE: Final = 5


@page
def escalation_list(request: Request, login: Login) -> Response:
    reason = request.query_params.get("reason") or None
    batch = request.query_params.get("batch") or None
    if reason is not None and reason not in REASONS:
        reason = None
    queue = state_of(request).queue
    after = _valid_id(request.query_params.get("after", ""))
    listing = list_open(queue, reason=reason, batch=batch, after=after)
    return render(
        request,
        "escalations.html",
        items=listing.items,
        unreadable=listing.unreadable,
        unreadable_count=listing.unreadable_count,
        next_after=listing.next_after,
        open_total=listing.open_total,
        after=after,
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
    queue = state_of(request).queue
    try:
        queue.claim_entry(entry_id, login.name)
    except EscalationNotFound as exc:
        flash(request, str(exc))
    except UNREADABLE:
        flash(request, _BLOCKED)
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
    queue = state_of(request).queue
    try:
        resolution = queue.resolve(item.entry_id, login.name, answer)
    except ResolutionInvalid as exc:
        return _detail(request, login, item, form=form, problems=exc.problems, status=422)
    except (EscalationNotFound, PublishFailed) as exc:
        # PublishFailed (the job's reply stream key holds another type) says that nothing
        # was written and the escalation stays open: the reviewer's claim stands.
        flash(request, str(exc))
        return redirect(f"/escalations/{item.entry_id}")
    except UNREADABLE:
        flash(request, _BLOCKED)
        return redirect(f"/escalations/{item.entry_id}")
    flash(request, f"resolved {resolution.job_id}: {_summary(resolution.answer)}")
    return redirect("/escalations")


@action()
def release(request: Request, login: Login, form: Form) -> Response:
    item = _open(request)
    if item is None:
        return _not_found(request)
    queue = state_of(request).queue
    try:
        queue.release(item.entry_id, login.name)
    except EscalationNotFound as exc:
        flash(request, str(exc))
        return redirect(f"/escalations/{item.entry_id}")
    flash(request, f"released {item.entry_id} to the queue")
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
    bulk = uses_bulk(message, fields)
    page = paged(fields, _page_number(request, form))
    shown = page.shown if bulk else fields
    keys = {f.problem_key for f in shown} | _menu_keys(menu)
    off_page = {f.problem_key for f in fields} - keys
    by_field: dict[str, list[str]] = {}
    general: list[str] = []
    elsewhere: list[str] = []
    for problem in problems:
        key = _attach(problem.field, keys, menu, (form or {}).get("call"))
        if key is not None:
            by_field.setdefault(key, []).append(problem.message)
        elif problem.field in off_page:
            elsewhere.append(problem.field.removeprefix("answer."))
        else:
            general.append(f"{problem.field}: {problem.message}")
    if elsewhere:
        named = ", ".join(elsewhere[:_NAMED_OFF_PAGE])
        extra = len(elsewhere) - _NAMED_OFF_PAGE
        more = f" and {extra} more" if extra > 0 else ""
        general.append(
            f"{len(elsewhere)} question(s) on other pages need an answer ({named}{more}): "
            "choose a bulk answer for them (only the choices of the page you publish from "
            "are sent)"
        )
    state = context.get("state")
    shown_ids = {f.question_id for f in shown}
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
        fields=shown,
        bulk=bulk,
        bulk_field=BULK_FIELD,
        bulk_choices=BULK_CHOICES,
        bulk_default=_bulk_default(fields),
        page=page,
        sift_question=_sift_question(message, fields),
        sift_items={i.index: i for i in message.items or []},
        menu=menu,
        has_state="state" in context,
        state_json=pretty_json(state),
        images=state_images(state, context.get("assets"), context.get("questions")),
        answers_json={
            k: v.model_dump(mode="json")
            for k, v in (message.answers or {}).items()
            if message.kind != "sift" and (not bulk or k in shown_ids)
        },
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
    return _valid_id(str(request.path_params.get("entry_id", "")))


def _valid_id(entry_id: str) -> str | None:
    """``entry_id`` if it is a stream entry id Redis takes, else None."""
    return entry_id if is_entry_id(entry_id) else None


def _open(request: Request) -> OpenEscalation | None:
    entry_id = _entry_id(request)
    if entry_id is None:
        return None
    return find_open(state_of(request).queue, entry_id)


def _page_number(request: Request, form: Form | None) -> int:
    raw = (form or {}).get("page") or request.query_params.get("page") or "1"
    # ASCII only: "²" is a digit to str.isdigit() and no number to int().
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 9 else 1


def _bulk_default(fields: list[DecideField]) -> str:
    """Keep the machine's answers, unless some questions need a reviewer's (then: choose)."""
    return "" if any(f.required and f.machine is None for f in fields) else "keep"


def _sift_question(message: Any, fields: list[DecideField]) -> str | None:
    if message.kind != "sift" or not fields:
        return None
    instructions = message.context["questions"][fields[0].question_id].get("instructions")
    question = instructions.get("question") if isinstance(instructions, dict) else None
    return question if isinstance(question, str) else json.dumps(question, ensure_ascii=False)


def _summary(answer: Any) -> str:
    """The answer as a flash line: whole if short, counted if big."""
    text = json.dumps(answer, ensure_ascii=False)
    if len(text) <= 300:
        return text
    if isinstance(answer, dict):
        counts: dict[str, int] = {}
        for value in answer.values():
            shown = json.dumps(value, ensure_ascii=False)
            counts[shown] = counts.get(shown, 0) + 1
        parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda c: -c[1])[:5])
        return f"{len(answer)} answers ({parts})"
    return text[:300] + "…"


def _not_found(request: Request) -> Response:
    return render(
        request,
        "error.html",
        status=404,
        title="Not open",
        message="No open escalation has that id: it may have been resolved.",
    )
