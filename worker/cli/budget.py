"""``decisions budget set|show|resume``: a batch's budget, which fails closed.

A batch's budget (``budget_usd`` on its jobs, or ``budget set``) is what its requests may
cost at most: before each request its worst case is reserved in the ledger, in the claim's
own transaction; one that does not fit is not sent and its job escalates
``budget_exhausted``. Raise the budget with ``set`` (lowering it never cancels a request
already sent), then ``resume`` runs exactly those jobs again: nothing was sent for them. A job
whose stored copy cannot be submitted again (a damaged row) is named and left as it is, not
reopened: reopened, it would wait for a run that never comes, and stop every later resume.
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from shared import strict_json
from shared.client import Client
from shared.errors import JobInvalid, NotStrictJSON
from shared.escalation_withdrawal import withdraw_escalations
from shared.intake import IntakeBook, intake_member
from shared.job_parsing import parse_job
from shared.limits import MAX_BUDGET_USD
from shared.redis_connect import redis_client
from shared.settings import get_settings
from worker.cli.option_values import identifier
from worker.cli.terminal import console, err_console
from worker.ledger import BudgetStatus, JobRow, Ledger

__all__ = ["add_budget_rows", "budget_json", "parse_usd", "register"]

budget_app = typer.Typer(help="A batch's budget: set it, show it, resume what it stopped.")
#: A batch as a job can name it: an empty one was shown, given a budget, resumed, as a batch.
BATCH = typer.Argument(..., callback=identifier, help="the batch")


def register(app: typer.Typer) -> None:
    app.add_typer(budget_app, name="budget")


def _ledger() -> Ledger:
    ledger = Ledger.from_settings(get_settings())
    ledger.check_schema()
    return ledger


def parse_usd(text: str) -> float:
    """A budget in USD as typed: a finite number above 0, at most ``MAX_BUDGET_USD``; else
    one line naming it, exit 2."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > MAX_BUDGET_USD:
        err_console.print(
            f"USD {text!r}: give a budget in dollars, a number above 0 and at most "
            f"{MAX_BUDGET_USD:,.0f} (e.g. 25 or 0.5)",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(2)
    return value


def budget_json(status: BudgetStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {
        "budget": status.scope,
        "limit_usd": status.limit_usd,
        "committed_usd": round(status.committed_usd, 12),
        "reserved_usd": status.reserved_usd,
        "calls_in_flight": status.calls_in_flight,
        "held_unknown_usd": status.held_unknown_usd,
        "calls_unknown_cost": status.calls_unknown_cost,
        "spent_usd": status.spent_usd,
        "spent_by_basis": status.booked_by_basis,
        "spent_before_budget_usd": status.spent_before_usd,
        "left_usd": status.left_usd,
        "jobs_budget_exhausted": status.jobs_exhausted,
    }


def add_budget_rows(table: Table, status: BudgetStatus | None) -> None:
    """The budget's lines under a batch's ledger figures."""
    table.add_section()
    if status is None:
        table.add_row("budget", "none")
        return
    table.add_row("budget", _usd(status.limit_usd))
    table.add_row(
        "  reserved (in flight)", f"{_usd(status.reserved_usd)} ({status.calls_in_flight})"
    )
    table.add_row(
        "  held (cost unknown)",
        f"{_usd(status.held_unknown_usd)} ({status.calls_unknown_cost})",
    )
    for basis, usd in status.booked_by_basis.items():
        table.add_row(f"  spent {basis}", _usd(usd))
    if status.spent_before_usd:
        table.add_row("  spent before the budget", _usd(status.spent_before_usd))
    table.add_row("  left", _usd(status.left_usd))
    if status.jobs_exhausted:
        table.add_row("  jobs budget_exhausted", str(status.jobs_exhausted))


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def _show(status: BudgetStatus | None, batch: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(budget_json(status), indent=2, sort_keys=True))
        return
    # Text, not markup: the batch is a producer's name ("[/]" ended the command).
    table = Table(title=Text(f"budget - batch {batch}"))
    table.add_column("what")
    table.add_column("USD", justify="right")
    add_budget_rows(table, status)
    console.print(table)


# A negative amount is an argument to refuse by name, not an unknown option.
@budget_app.command("set", context_settings={"ignore_unknown_options": True})
def set_budget(
    batch: str = BATCH,
    usd: str = typer.Argument(..., metavar="USD", help="its budget in US dollars"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Set a batch's budget: raise it while it runs, or lower it (a request already sent is
    never cancelled; later ones that do not fit are not sent)."""
    value = parse_usd(usd)
    _show(_ledger().set_budget(batch, value, warn=_warn), batch, as_json)


def _warn(line: str) -> None:
    err_console.print(line, highlight=False, markup=False)


@budget_app.command("show")
def show(
    batch: str = BATCH,
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """A batch's budget: limit, reserved, held for unknown costs, spent by basis, left."""
    _show(_ledger().budget(batch), batch, as_json)


@budget_app.command("resume")
def resume(batch: str = BATCH) -> None:
    """Run again the batch's jobs that escalated budget_exhausted (nothing was sent for them;
    nothing else is run again). Those a reviewer resolved meanwhile are left alone; the
    others' escalations leave the reviewers' queue first."""
    settings = get_settings()
    ledger = _ledger()
    streams = redis_client(settings.redis_url)
    exhausted = ledger.exhausted_jobs(batch)
    status = ledger.budget(batch)
    if status is not None and status.left_usd is not None and status.left_usd <= 0:
        err_console.print(
            f"budget of batch {batch} has nothing left ({_usd(status.left_usd)}): raise it "
            f"first with `decisions budget set {batch} USD`",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(1)
    # Each job is read before the reopen commits: one that cannot be read stays as it is.
    jobs: dict[str, dict[str, Any]] = {}
    unreadable: dict[str, str] = {}

    def readable(row: JobRow) -> bool:
        job = _resubmitted(row)
        if isinstance(job, str):
            unreadable[row.job_id] = job
            return False
        jobs[row.job_id] = job
        return True

    # A job's escalation leaves the queue before the job is reopened, in one step with the
    # check that no reviewer resolved it (``shared.escalation_withdrawal``): resolved after
    # the resume, it would publish a resolution for a job that also gets the resumed run's
    # terminal message. Only the jobs withdrawn are reopened (found by an attack: a job that
    # escalated during the resume was reopened with its escalation still open), and only
    # jobs whose escalation is published can be (a worker writes the ledger, then publishes:
    # withdrawn before its entry came, the entry would come after). A resolution the ledger
    # stored keeps a job as it is though Redis lost its record. Only jobs whose stored job
    # reads are withdrawn: the others stay as they are, escalation included.
    stored = [row for row in map(ledger.get_job, exhausted) if row is not None]
    known = {row.job_id for row in stored if ledger.resolved(row.job_id)}
    candidates = [
        row.job_id
        for row in stored
        if row.published_at is not None and row.job_id not in known and readable(row)
    ]
    withdrawal = withdraw_escalations(streams, candidates)
    resolved = frozenset(withdrawal.resolved) | known
    rows = ledger.reopen_exhausted(batch, only=frozenset(withdrawal.withdrawn), keep=readable)
    # A job reopened before (not just now) is queued again only if no intake record says it
    # is queued or running: a resume interrupted before it queued them leaves none (found by
    # two attacks: two resumes at once queued every job twice, and both said so). A broker
    # that keeps no intake records (RabbitMQ) queues them again: the ledger runs each once.
    earlier = {intake_member(row.reply_to, row.job_id): row.job_id for row in rows}
    for member in [m for m, job_id in earlier.items() if job_id in withdrawal.withdrawn]:
        del earlier[member]
    queued = {earlier[member] for member in IntakeBook(streams).held(earlier)}
    rows = [row for row in rows if row.job_id not in queued]
    for job_id, why in sorted(unreadable.items()):
        err_console.print(
            f"{job_id}: left as it is, its stored job cannot be read ({why})",
            highlight=False,
            markup=False,
        )
    if rows:
        report = Client(settings, redis_client=streams).submit_batch(
            [jobs[row.job_id] for row in rows]
        )
        for job_id, problems in report.rejected.items():
            fields = ", ".join(p.field for p in problems)
            err_console.print(
                f"{job_id}: not resubmitted ({fields})", highlight=False, markup=False
            )
    console.print(
        f"resumed {len(rows)} job(s) of batch {batch} that escalated budget_exhausted"
        + (f"; {len(resolved)} resolved by a reviewer left alone" if resolved else "")
        + (f"; {len(queued)} already queued by an earlier resume" if queued else ""),
        highlight=False,
        markup=False,  # the batch is a producer's name: "b[/]" is text, not markup
    )
    left = set(ledger.exhausted_jobs(batch)) - resolved - set(unreadable)
    if left:
        console.print(
            f"{len(left)} job(s) escalated budget_exhausted during this resume, or their "
            f"escalation is still being published: run it again in a moment to resume them",
            highlight=False,
            markup=False,
        )
    if unreadable:
        raise typer.Exit(1)


def _resubmitted(row: JobRow) -> dict[str, Any] | str:
    """The stored job as submitted again: the ledger keeps its (new) deadline, so the job's
    own deadline and submission time go (neither is part of its fingerprint). Or why it
    cannot be, checked as the submit will check it (a damaged row)."""
    try:
        job: Any = strict_json.loads(row.job_json)
    except (NotStrictJSON, ValueError, RecursionError):
        return "not JSON"
    if not isinstance(job, dict):
        return "not a JSON object"
    for name in ("deadline", "submitted_at"):
        job.pop(name, None)
    job = {name: value for name, value in job.items() if value is not None}
    if job.get("id") != row.job_id:
        return "its id is another's"  # submitted, it would run some other job
    try:
        parse_job(job)
    except JobInvalid as exc:
        return "not a valid job: " + ", ".join(sorted({p.field for p in exc.problems}))
    return job
