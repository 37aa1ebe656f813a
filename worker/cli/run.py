"""``decisions run FILE.jsonl``: the embedded main job, no servers needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from celery import signals
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.errors import LedgerError
from shared.rejection import rejection_for
from shared.settings import get_settings
from worker.cli.jsonl import read_lines, unreadable_problems
from worker.cli.ledger_file import cannot_write, unwritable
from worker.cli.option_values import not_empty_path
from worker.cli.startup import check_registries
from worker.cli.terminal import console, err_console
from worker.delivery.outage import ledger_outage
from worker.embedded import RunSummary, at_the_faux, run_batch
from worker.ledger.engine import describe_url
from worker.ledger.errors import TablesMissing
from worker.process.logs import configure_logging

__all__ = ["LedgerRetries", "register"]


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        ctx: typer.Context,
        file: Path = typer.Argument(
            ..., exists=True, dir_okay=False, help="a batch, one job per line"
        ),
        out: Path = typer.Option(
            Path("out"),
            "--out",
            path_type=str,  # "" as typed: typer makes it Path(".")
            callback=not_empty_path,
            help="where results.jsonl and escalations.jsonl go",
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="log every job's events"),
        pack: bool = typer.Option(
            False, "--pack", help="let decide jobs about the same state share requests"
        ),
        live: bool = typer.Option(
            False,
            "--live",
            help="ask the real providers the jobs name, with the keys in the environment "
            "(paid); without it the faux answers every provider",
        ),
    ) -> None:
        """Run a batch on an in-process worker: memory broker, the ledger DECISIONS_LEDGER_URL
        names (SQLite ./decisions.db unless set), and the faux answering every provider
        (DECISIONS_FAUX_URL's if set, else one of its own; nothing leaves this machine)
        unless --live."""
        settings = get_settings()
        configure_logging("DEBUG" if verbose else "WARNING", settings.log_format)
        if live:
            console.print(
                "providers: [bold]live[/]: each job's provider is asked at its real host, "
                f"with the key in the environment (default provider: {settings.default_provider})"
            )
        else:
            settings, faux_url = ctx.with_resource(at_the_faux(settings))
            console.print(
                f"providers: [bold]faux[/] at {faux_url} answers every provider; no request "
                "leaves this machine (--live asks the real ones)"
            )
        # As `decisions worker` does, before any job: a ceiling or limit keyed by a misspelt
        # provider would not apply to the run (explained as one line, exit 2).
        check_registries(settings)
        # And a SQLite file it cannot write (?mode=ro, a read-only mount, a full disk):
        # explained before any job, as the worker refuses it (found by an attack: run wrote
        # a ?mode=ro file anyway); a full disk's exit is a runtime's, as during a run.
        unwritable_now = unwritable(settings.ledger_url)
        if unwritable_now is not None:
            for line in unwritable_now.lines():
                err_console.print(line, highlight=False, markup=False)
            raise typer.Exit(unwritable_now.exit_code)
        # Its password never shown (found by an attack: the URL was printed whole).
        console.print(f"ledger: {describe_url(settings.ledger_url)}", markup=False)
        lines = read_lines(file)
        by_number = {line.number: line for line in lines}  # blank and // lines are skipped
        for number, problem in unreadable_problems(lines):
            # Each is rejected when its turn comes; named here by its line, since it has no
            # id, and by the id its rejected message carries (as `decisions submit` does).
            stream_id = rejection_for(by_number[number].job, [problem]).job_id
            said = f"{problem.message} [stream id {stream_id}]"
            err_console.print(f"[yellow]line {number}[/]: {escape(said)}")
        jobs = [line.job for line in lines]
        finished = [0, len(jobs)]  # what on_progress last said: for a Ctrl-C's line
        with LedgerRetries() as retries, Progress(
            TextColumn("[bold]jobs"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task("jobs", total=None)

            def on_progress(done: int, total: int) -> None:
                finished[:] = [done, total]
                retries.check()  # raised here, the error ends the run (and is explained)
                progress.update(task, completed=done, total=total)

            try:
                summary = run_batch(
                    jobs, settings=settings, out_dir=out, on_progress=on_progress, pack=pack
                )
            except KeyboardInterrupt:
                # Said, not a bare 130 (found by an attack): what finished, and that the same
                # command goes on where this one stopped.
                progress.stop()
                err_console.print(
                    f"interrupted: {finished[0]} of {finished[1]} job(s) finished, nothing "
                    f"written to {out}",
                    highlight=False,
                    markup=False,
                )
                err_console.print(
                    "running the same file again goes on: finished jobs replay from the "
                    "ledger, and a request already sent is never sent again",
                    highlight=False,
                    markup=False,
                )
                raise typer.Exit(130) from None  # the exit status of a Ctrl-C (worker.cli)
        _print_summary(summary)


class LedgerRetries:
    """The run's tasks retried for the ledger (``RETRIED`` in ``worker.tasks``, for ever):
    ``check`` raises the first error no retry will mend, and says each other one once.

    A SQLite file that cannot be written (read-only, a full disk: ``worker.cli.ledger_file``)
    stops the run, where it retried in silence and looked hung. An operator would expect
    that: the run is one process with one ledger file, and no job can go on until someone
    frees the disk or fixes the permissions. Stopping loses nothing: no request is sent that
    the ledger did not record as claimed first, so the same batch can run again (what it
    stored replays, a call sent and not recorded as answered is never sent again). So do its
    ledger's tables dropped under it (what they held is gone with them; the explanation says
    so). Any other
    ledger error (locked past the busy timeout, say) may pass: it is said once, and retried.
    """

    def __init__(self) -> None:
        self._fatal: BaseException | None = None
        self._seen: list[BaseException] = []
        self._said: set[str] = set()

    def __enter__(self) -> LedgerRetries:
        signals.task_retry.connect(self._on_retry, weak=False)
        # A job that holds an answer waits out an outage inside its task, not by a retry.
        ledger_outage.connect(self._on_outage, weak=False)
        return self

    def __exit__(self, *exc: object) -> None:
        signals.task_retry.disconnect(self._on_retry)
        ledger_outage.disconnect(self._on_outage)

    def _on_outage(self, sender: Any = None, error: Any = None, **_: Any) -> None:
        self._on_retry(sender, error)

    def _on_retry(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        # On the embedded worker's thread: noted here, acted on by ``check`` on the run's.
        error = getattr(reason, "exc", reason)
        if not isinstance(error, LedgerError):
            return
        # The run migrated its own ledger at start: tables missing now were dropped under
        # it, and no retry brings them back (it retried for ever, saying so once).
        if self._fatal is None and (cannot_write(error) or isinstance(error, TablesMissing)):
            self._fatal = error
        self._seen.append(error)

    def check(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        while self._seen:
            from worker.cli.errors import explain  # only when there is something to say

            said = explain(self._seen.pop(0)).problem
            if said not in self._said:
                self._said.add(said)
                err_console.print(f"[yellow]{escape(said)}; retrying[/]")


def _print_summary(summary: RunSummary) -> None:
    table = Table(title="decisions run", show_header=True)
    table.add_column("outcome")
    table.add_column("jobs", justify="right")
    table.add_row("answered", str(summary.by_type["result"]))
    table.add_row("escalated", str(summary.by_type["escalation"]))
    for reason, count in sorted(summary.escalation_reasons.items()):
        table.add_row(f"  {reason}", str(count))
    table.add_row("rejected", str(summary.by_type["rejected"]))
    if summary.rejected_at_submit:
        table.add_row("  at submit (never queued)", str(summary.rejected_at_submit))
    table.add_section()
    table.add_row("requests sent (this run)", str(summary.requests_sent))
    table.add_row("cost this run (USD)", f"{summary.cost_usd_this_run:.6f}")
    table.add_row("cost of all receipts (USD)", f"{summary.cost_usd_total:.6f}")
    if summary.cost_unknown_calls:
        table.add_row("calls of unknown cost", str(summary.cost_unknown_calls))
    console.print(table)
    for path in summary.outputs.values():
        console.print(f"wrote {path}")
