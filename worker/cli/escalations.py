"""``decisions escalations list|claim|resolve|release``: a reviewer's commands."""

from __future__ import annotations

import getpass
import json
import socket

import redis
import typer
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from shared.errors import EscalationNotFound, ResolutionInvalid
from shared.escalations import EscalationQueue, OpenEscalation
from shared.settings import get_settings
from worker.cli.console import console, err_console

__all__ = ["register"]

escalations_app = typer.Typer(help="Decisions a machine should not make alone: for reviewers.")


def register(app: typer.Typer) -> None:
    app.add_typer(escalations_app, name="escalations")


def _queue() -> EscalationQueue:
    settings = get_settings()
    return EscalationQueue(
        redis.Redis.from_url(settings.redis_url),
        claim_idle_s=settings.escalation_claim_idle_s,
        marker_ttl_s=settings.publish_marker_ttl_s,
        menu_checker=_menu_checker(),
    )


def _menu_checker():  # type: ignore[no-untyped-def]
    try:
        from worker.menus.resolution import check_menu_answer
    except ImportError:
        return None
    return check_menu_answer


def _default_reviewer() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


REVIEWER = typer.Option(None, "--reviewer", help="your name (default: user@host)")


@escalations_app.command("list")
def list_(
    reason: str | None = typer.Option(None, "--reason"),
    batch: str | None = typer.Option(None, "--batch"),
) -> None:
    """Open escalations, oldest first: waiting ones and those a reviewer holds."""
    items = _queue().open(reason=reason, batch=batch)
    table = Table(title=f"{len(items)} open escalation(s)")
    for column in ("id", "job", "batch", "reason", "age", "held by"):
        table.add_column(column)
    for item in items:
        table.add_row(
            item.entry_id,
            item.message.job_id,
            item.message.batch or "",
            item.message.reason,
            f"{item.age_s:.0f} s",
            item.holder or "-",
        )
    console.print(table)


@escalations_app.command("claim")
def claim(
    reason: str | None = typer.Option(None, "--reason"),
    batch: str | None = typer.Option(None, "--batch"),
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
    console.print(
        Panel.fit(
            f"[bold]{message.reason}[/]  job {message.job_id}  "
            f"batch {message.batch or '-'}\n{message.detail}",
            title=f"escalation {item.entry_id}",
        )
    )
    context = message.context
    if "questions" in context:
        console.print("[bold]questions[/]")
        console.print(Syntax(json.dumps(context["questions"], indent=2), "json"))
        console.print("[bold]state[/]")
        console.print(
            Syntax(json.dumps(context.get("state"), indent=2, ensure_ascii=False), "json")
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
        console.print(context["menu"])
    if context.get("last_reply"):
        console.print("[bold]the model's last reply[/]")
        console.print(context["last_reply"])
    console.print(f"answer with: decisions escalations resolve {item.entry_id} --answer JSON")


@escalations_app.command("resolve")
def resolve(
    entry_id: str = typer.Argument(..., help="the escalation's id (from list or claim)"),
    answer: str = typer.Option(..., "--answer", help="JSON: {question: value} or a menu pick"),
    reviewer: str | None = REVIEWER,
) -> None:
    """Check the answer against the question or menu, publish it as the job's resolution."""
    try:
        parsed = json.loads(answer)
    except ValueError:
        err_console.print("[red]--answer is not JSON[/]")
        raise typer.Exit(2) from None
    try:
        resolution = _queue().resolve(entry_id, reviewer or _default_reviewer(), parsed)
    except ResolutionInvalid as exc:
        for problem in exc.problems:
            err_console.print(f"[red]{problem.field}[/]: {problem.message}")
        raise typer.Exit(2) from None
    except EscalationNotFound as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    console.print(f"resolved {resolution.job_id}: {json.dumps(resolution.answer)}")


@escalations_app.command("release")
def release(
    entry_id: str = typer.Argument(...),
    reviewer: str | None = REVIEWER,
) -> None:
    """Give an escalation back to the queue."""
    try:
        _queue().release(entry_id, reviewer or _default_reviewer())
    except EscalationNotFound as exc:
        err_console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    console.print(f"released {entry_id}")
