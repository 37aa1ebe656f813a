"""``decisions escalations list|claim|resolve|release``: a reviewer's commands.

An escalation entry that does not parse is skipped with a line on stderr naming it; the
others are listed and claimed as usual. A resolve's answer may be any size: ``--answer -``
reads it from stdin, ``--answer-file PATH`` from a file (an inline argument is bounded by
the system's argument list).

Everything a job or a host wrote (a batch, a detail, the menu, the model's reply, a reviewer's
name) is printed as plain text, never as Rich markup, with its control characters named
(``shared.visible_text``): ``b[/]`` as a batch made ``list`` fail for every reviewer, a
``[link=...]`` in it printed a link, and an ESC in it reached the terminal.
"""

from __future__ import annotations

import getpass
import json
import shlex
import socket
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from shared import json_measure
from shared.errors import EscalationNotFound, PublishFailed, ResolutionInvalid
from shared.escalation_entries import is_entry_id
from shared.escalation_listing import list_open
from shared.escalations import EscalationQueue, OpenEscalation
from shared.limits import current_limits
from shared.redis_connect import redis_client
from shared.settings import get_settings
from shared.visible_text import visible
from worker.cli.option_values import identifier, name, reviewer
from worker.cli.terminal import console, err_console

__all__ = ["register"]

escalations_app = typer.Typer(help="Decisions a machine should not make alone: for reviewers.")
#: An escalation's id: its entry's id in the escalation stream (milliseconds-sequence).


def register(app: typer.Typer) -> None:
    app.add_typer(escalations_app, name="escalations")


def _queue() -> EscalationQueue:
    settings = get_settings()
    return EscalationQueue(
        redis_client(settings.redis_url),
        claim_idle_s=settings.escalation_claim_idle_s,
        marker_ttl_s=settings.publish_marker_ttl_s,
        menu_checker=_menu_checker(),
        on_skip=_report_skip,
    )


def _report_skip(entry_id: str, why: str) -> None:
    err_console.print(
        Text.assemble((f"skipped escalation {visible(entry_id)}", "yellow"), f": {visible(why)}")
    )


def _text(value: str | None, empty: str = "") -> Text:
    """A job's or host's text as printed: plain (no markup), its controls named."""
    return Text(visible(value) if value else empty)


def _menu_checker():  # type: ignore[no-untyped-def]
    try:
        from worker.kinds.menus.resolution import check_menu_answer
    except ImportError:
        return None
    return check_menu_answer


def _default_reviewer() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


REVIEWER = typer.Option(
    None, "--reviewer", callback=reviewer, help="your name (default: user@host)"
)


REASON = typer.Option(
    None,
    "--reason",
    callback=name,
    help="only escalations for this reason (low_confidence, decision_refused, ...)",
)
BATCH = typer.Option(
    None, "--batch", callback=identifier, help="only escalations of jobs in this batch"
)


AFTER = typer.Option(
    None,
    "--after",
    metavar="ID",
    help="the next page: the escalations after this id (the last line of a page names it)",
)


@escalations_app.command("list")
def list_(
    reason: str | None = REASON,
    batch: str | None = BATCH,
    as_json: bool = typer.Option(False, "--json", help="print a JSON array instead of a table"),
    after: str | None = AFTER,
) -> None:
    """Open escalations, oldest first, a page at a time: waiting ones and those a reviewer
    holds."""
    if after is not None:
        _check_entry_id(after)
    # A page, as the console shows (shared.escalation_listing): every open entry read on each
    # call took seconds and megabytes with 20,000 of them.
    page = list_open(_queue(), reason=reason, batch=batch, after=after)
    for entry_id in page.unreadable:
        _report_skip(entry_id, page.unreadable_why.get(entry_id, "it cannot be read"))
    if page.unreadable_count > len(page.unreadable):
        _report_skip("...", f"{page.unreadable_count - len(page.unreadable)} more cannot be read")
    items = page.items
    more = None
    if page.next_after is not None:
        words = ["decisions", "escalations", "list"]
        words += [*(["--reason", reason] if reason else []), *(["--batch", batch] if batch else [])]
        words += [*(["--json"] if as_json else []), "--after", page.next_after]
        more = f"more after {page.next_after}: {shlex.join(words)}"
    if as_json:
        typer.echo(json.dumps([_listed(item) for item in items], indent=2))
        if more is not None:  # stdout stays one JSON array
            err_console.print(Text(more))
        return
    total = page.open_total
    shown = f"{len(items)}" if len(items) == total else f"{len(items)} of {total}"
    table = Table(title=f"{shown} open escalation(s)")
    # The ids are copied into claim/resolve/release: never cut, wrapped whole if need be.
    widest = max((len(item.entry_id) for item in items), default=2)
    table.add_column("id", no_wrap=True, min_width=widest)
    table.add_column("job", overflow="fold")
    for column in ("batch", "reason"):
        table.add_column(column, overflow="fold")
    table.add_column("age", no_wrap=True)
    table.add_column("held by", overflow="fold")
    for item in items:
        table.add_row(
            item.entry_id,
            _text(item.message.job_id),
            _text(item.message.batch),
            _text(item.message.reason),
            f"{item.age_s:.0f} s",
            _text(item.holder, "-"),
        )
    console.print(table)
    if more is not None:
        console.print(Text(more), soft_wrap=True)


def _listed(item: OpenEscalation) -> dict[str, object]:
    return {
        "id": item.entry_id,
        "job_id": item.message.job_id,
        "batch": item.message.batch,
        "reason": item.message.reason,
        "age_s": round(item.age_s, 3),
        "held_by": item.holder,
    }


@escalations_app.command("claim")
def claim(
    reason: str | None = REASON,
    batch: str | None = BATCH,
    reviewer: str | None = REVIEWER,
    as_json: bool = typer.Option(False, "--json", help="print the escalation as JSON"),
) -> None:
    """Take the oldest waiting escalation and show what it needs."""
    item = _queue().claim(reviewer or _default_reviewer(), reason=reason, batch=batch)
    if item is None:
        console.print("no escalation is waiting")
        raise typer.Exit(1)
    if as_json:
        typer.echo(
            json.dumps({"id": item.entry_id, "escalation": item.message.model_dump(mode="json")})
        )
        return
    _show(item)


def _show(item: OpenEscalation) -> None:
    message = item.message
    heading = Text.assemble(
        (visible(message.reason), "bold"),
        f"  job {visible(message.job_id)}  batch {visible(message.batch or '-')}\n",
        visible(message.detail),
    )
    console.print(Panel.fit(heading, title=f"escalation {item.entry_id}"))
    context = message.context
    if "questions" in context:
        console.print("[bold]questions[/]")
        console.print(Syntax(json.dumps(context["questions"], indent=2), "json", word_wrap=True))
        console.print("[bold]state[/]")
        console.print(
            Syntax(
                # Non-ASCII letters as they are; C1 and bidi controls (which json leaves raw
                # with ensure_ascii off) named.
                visible(json.dumps(context.get("state"), indent=2, ensure_ascii=False)),
                "json",
                word_wrap=True,  # the whole state, wrapped: never cropped at the edge
            )
        )
    if message.answers:
        console.print("[bold]the provider's answers[/]")
        console.print(
            Syntax(
                json.dumps(
                    {k: v.model_dump(mode="json") for k, v in message.answers.items()}, indent=2
                ),
                "json",
            )
        )
    if "menu" in context:
        console.print("[bold]menu[/]")
        console.print(_text(str(context["menu"])))
    if context.get("last_reply"):
        console.print("[bold]the model's last reply[/]")
        console.print(_text(str(context["last_reply"])))
    console.print(
        f"answer with: decisions escalations resolve {item.entry_id} --answer JSON "
        "(or --answer - to read it from stdin, --answer-file PATH)"
    )


@escalations_app.command("resolve")
def resolve(
    entry_id: str = typer.Argument(..., help="the escalation's id (from list or claim)"),
    answer: str | None = typer.Option(
        None, "--answer", help="JSON: {question: value} or a menu pick; - reads it from stdin"
    ),
    answer_file: Path | None = typer.Option(
        None, "--answer-file", help="a file holding the answer's JSON (any size)"
    ),
    reviewer: str | None = REVIEWER,
) -> None:
    """Check the answer against the question or menu, publish it as the job's resolution."""
    _check_entry_id(entry_id)
    parsed = _read_answer(answer, answer_file)
    try:
        resolution = _queue().resolve(entry_id, reviewer or _default_reviewer(), parsed)
    except ResolutionInvalid as exc:
        for problem in exc.problems[:50]:
            err_console.print(
                Text.assemble((visible(problem.field), "red"), f": {visible(problem.message)}")
            )
        if len(exc.problems) > 50:
            err_console.print(f"... and {len(exc.problems) - 50} more problem(s)")
        raise typer.Exit(2) from None
    except (EscalationNotFound, PublishFailed) as exc:
        err_console.print(Text(visible(str(exc)), "red"))
        raise typer.Exit(1) from None
    shown = json.dumps(resolution.answer)
    if len(shown) > 200:
        shown = f"{shown[:200]}... ({len(shown)} characters)"
    console.print(Text(f"resolved {visible(resolution.job_id)}: {visible(shown)}"))


def _read_answer(answer: str | None, answer_file: Path | None) -> object:
    """The answer's JSON from exactly one of --answer, --answer - (stdin), --answer-file."""
    if (answer is None) == (answer_file is None):
        err_console.print("[red]give the answer with --answer JSON, --answer - or --answer-file[/]")
        raise typer.Exit(2)
    where = "--answer"
    if answer_file is not None:
        where = f"--answer-file {answer_file}"
        try:
            text = answer_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            err_console.print(
                Text(f"{visible(where)}: cannot read it ({exc.__class__.__name__})", "red")
            )
            raise typer.Exit(2) from None
    elif answer == "-":
        where = "--answer - (stdin)"
        text = sys.stdin.read()
    else:
        text = str(answer)
    problem: str | None
    try:
        parsed = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:  # "[[[[...": json's decoder recurses once a level
        parsed, problem = None, "is not JSON: nested too deep to read"
    except ValueError as exc:
        parsed, problem = None, f"is not JSON: {exc}"
    else:
        # As deep as a job may be, no deeper (as ``decisions submit`` and the console):
        # deeper, checking or publishing it would recurse past Python's limit.
        found = json_measure.measure(parsed, max_depth=current_limits().depth)
        problem = None if found.problem is None else found.problem[1]
    if problem is not None:
        err_console.print(Text(f"{visible(where)} {visible(problem)}", "red"))
        raise typer.Exit(2) from None
    return parsed


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Strict JSON: a key given twice would silently keep its last value.
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} appears twice")
        found[key] = value
    return found


@escalations_app.command("release")
def release(
    entry_id: str = typer.Argument(..., help="the escalation's id (from list or claim)"),
    reviewer: str | None = REVIEWER,
) -> None:
    """Give an escalation back to the queue."""
    _check_entry_id(entry_id)
    queue = _queue()
    who = reviewer or _default_reviewer()
    try:
        queue.release(entry_id, who)
    except EscalationNotFound as exc:
        err_console.print(Text(visible(_not_released(queue, entry_id, who, exc)), "red"))
        raise typer.Exit(1) from None
    console.print(f"released {entry_id}")


def _check_entry_id(entry_id: str) -> None:
    # An id of another shape was Redis's own error ("Invalid stream ID ... @user_script:2").
    if not is_entry_id(entry_id, position=True):
        err_console.print(
            f"[red]{escape(repr(entry_id))} is not an escalation id[/] (one reads like "
            "1712345678901-0: see decisions escalations list)",
            highlight=False,
        )
        raise typer.Exit(2)


def _not_released(queue: EscalationQueue, entry_id: str, reviewer: str, exc: Exception) -> str:
    """Why ``reviewer`` could not release ``entry_id``: who holds it, or that nobody does."""
    try:
        item = queue.get(entry_id)
    except EscalationNotFound:
        return f"{exc}: it is not open (resolved, or no such id: see decisions escalations list)"
    if item.holder is None:
        return f"{exc}: nobody holds it, it is waiting in the queue"
    return (
        f"{exc}: it is held by {item.holder}; "
        f"if that is you, run: decisions escalations release {entry_id} --reviewer {item.holder}"
    )
