"""``decisions submit`` and ``decisions results``: a producer's and a consumer's commands."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shared import keys, tracing
from shared.client import PRODUCER_SERVICE, Client, SubmitReport
from shared.redis_connect import redis_client
from shared.scrub import mask_url
from shared.settings import Settings, get_settings
from shared.streams import follow_stream, read_stream
from shared.submit_rejections import submit_rejection
from shared.tracing import COMMAND_EXPORT_TIMEOUT_S
from worker.cli.jsonl import line_number, line_of, plain_reason, read_lines
from worker.cli.option_values import count, seconds
from worker.cli.terminal import console, err_console
from worker.kinds.judgments import judgment_checker
from worker.kinds.judgments.dryrun import print_report, report_json, worker_prices
from worker.kinds.menus.submit import job_checker
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry

__all__ = ["register", "reply_bound_s"]


def register(app: typer.Typer) -> None:
    @app.command("submit")
    def submit(
        file: Path = typer.Argument(
            ..., exists=True, dir_okay=False, help="a batch, one job per line"
        ),
        reply_to: str = typer.Option(..., "--reply-to", help="the stream that gets every reply"),
        wait: bool = typer.Option(
            False, "--wait", help="follow the stream until every job has replied"
        ),
        chunk_size: int | None = typer.Option(
            None, "--chunk-size", callback=count, help="jobs per Celery message"
        ),
        timeout: float | None = typer.Option(
            None, "--timeout", callback=seconds, help="give up waiting after this many s"
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="validate and estimate requests and cost; send nothing"
        ),
        price: list[str] = typer.Option(
            [], "--price", help="PROVIDER=USD per million input tokens, or PROVIDER=USD/request"
        ),
        as_json: bool = typer.Option(False, "--json", help="with --dry-run: print JSON"),
        pack: bool = typer.Option(
            False,
            "--pack",
            help="let decide jobs about the same state and provider share requests",
        ),
    ) -> None:
        """Validate a batch and enqueue it to DECISIONS_BROKER_URL; invalid lines are rejected.

        The batch's estimate (requests after packing, cost per provider) is stored for
        ``decisions ledger status --batch``; ``--dry-run`` prints it and sends nothing.
        ``--pack`` packs decide jobs of one batch about the same state, for the same provider
        and model, into shared requests; each job still gets its own reply."""
        # Options that only mean something beside another were ignored without it: a
        # --timeout that bounded nothing, a --json that printed the usual lines.
        if timeout is not None and not wait:
            raise typer.BadParameter(
                "only with --wait (it bounds the wait)", param_hint="'--timeout'"
            )
        if as_json and not dry_run:
            raise typer.BadParameter(
                "only with --dry-run (it prints the estimate as JSON)", param_hint="'--json'"
            )
        problem = keys.reply_to_problem(reply_to)
        if problem:
            err_console.print(f"[red]--reply-to {reply_to[:80]!r}: {problem}[/]", highlight=False)
            raise typer.Exit(2)
        settings = get_settings()
        # Before the client's own: a collector that does not answer holds the exit 2 s, not 10.
        tracing.configure(
            settings, service_name=PRODUCER_SERVICE, export_timeout_s=COMMAND_EXPORT_TIMEOUT_S
        )
        providers = ProviderRegistry.from_settings(settings)
        checker = judgment_checker(
            providers, job_checker(providers, RuntimeRegistry.from_settings(settings))
        )
        client = Client(settings, checker=checker)
        # A price for a provider there is none of was ignored without a word (an attack).
        known = {*providers.names(), *providers.absent}
        for text in price:
            provider = text.partition("=")[0].strip()
            if provider and provider not in known:
                err_console.print(
                    f"--price {text}: there is no provider {provider!r}; the providers are "
                    f"{', '.join(sorted(known))}",
                    highlight=False,
                    markup=False,
                )
                raise typer.Exit(2)
        try:
            lines = read_lines(file)
            jobs = [line.job for line in lines]
            estimate = client.estimate(
                jobs, reply_to=reply_to, prices=worker_prices(settings, price), pack=pack
            )
        except KeyboardInterrupt:
            # Still reading and checking the file: nothing went out, and saying so spares
            # the user a look at the queue (a Ctrl-C here exited 130 with no word).
            err_console.print(f"[red]interrupted while reading {escape(str(file))}: "
                              "nothing was queued[/]")
            raise typer.Exit(130) from None
        if dry_run:
            # Lines without an id by their 1-based number in the file, as submit names them.
            numbered = {lines[n].number: p for n, p in estimate.rejected_lines.items()}
            if as_json:
                typer.echo(report_json(dataclasses.replace(estimate, rejected_lines=numbered)))
            else:
                # And a job by its id, with its line.
                named = {
                    f"{key} ({line_of(key, lines)})": problems
                    for key, problems in estimate.rejected.items()
                }
                shown = dataclasses.replace(estimate, rejected=named, rejected_lines=numbered)
                print_report(shown, console, err_console)
            return
        report = _submit_or_say_how_far(client, jobs, reply_to, chunk_size, pack)
        console.print(
            f"submitted {len(report.job_ids)} job(s) in {report.messages} message(s) to "
            f"{_safe_url(settings.broker_url)}; rejected {report.rejected_count}; "
            f"replies on {reply_to!r}"
        )
        for job_id, problems in report.rejected.items():
            listed = plain_reason(problems, line_number(job_id, lines))
            where = f"{job_id} ({line_of(job_id, lines)})"
            # Escaped: a job id or message may hold "[", which rich would read as markup.
            err_console.print(f"[yellow]rejected[/] {escape(where)}: {escape(listed)}")
        for position, problems in report.rejected_lines.items():
            line = lines[position]
            # The id its rejected message carries in the stream: one name for the line.
            stream_id = submit_rejection(line.job, problems, reply_to).job_id
            listed = f"{plain_reason(problems, line)} [stream id {stream_id}]"
            err_console.print(f"[yellow]rejected[/] line {line.number}: {escape(listed)}")
        if not wait:
            return
        if not report.job_ids and not report.rejected_count:
            # An empty file (or blank and comment lines only): nothing was rejected either.
            err_console.print(f"[red]{escape(str(file))} holds no job: nothing was queued[/]")
            err_console.print("put one JSON job object per line and submit again")
            raise typer.Exit(2)
        if not report.job_ids:
            err_console.print(
                f"[red]every job was rejected ({report.rejected_count}): nothing was queued, "
                "no reply to wait for; fix the lines above and submit again[/]"
            )
            raise typer.Exit(1)
        wanted = set(report.job_ids)
        bound_s = timeout if timeout is not None else reply_bound_s(settings, report)
        done: set[str] = set()
        counts: dict[str, int] = {}
        try:
            with Progress(
                TextColumn("[bold]replies"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("replies", total=len(wanted))
                for reply in client.replies(reply_to, job_ids=wanted, timeout_s=bound_s):
                    done.add(reply.job_id)
                    counts[reply.type] = counts.get(reply.type, 0) + 1
                    progress.advance(task)
        except TimeoutError:
            _report_missing(sorted(wanted - done), bound_s, given=timeout is not None)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            # The jobs are queued whatever the wait does: say so, and where the rest land
            # (a Ctrl-C here exited 130 with no word, as if it had stopped the jobs).
            err_console.print(
                f"[yellow]stopped waiting: {len(done)} of {len(wanted)} job(s) have replied; "
                "the others stay queued and will still be answered[/]"
            )
            err_console.print(f"read every reply with: decisions results {escape(reply_to)}")
            raise typer.Exit(130) from None
        summary = ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items()))
        console.print(f"every job has replied ({summary})")

    @app.command("results")
    def results(
        stream: str = typer.Argument(..., help="a reply stream (a job's reply_to)"),
        follow: bool = typer.Option(
            False, "--follow", "-f", help="keep printing as replies arrive"
        ),
    ) -> None:
        """Print a reply stream as JSON lines (every entry, duplicates included)."""
        if not keys.is_reply_name(stream):
            err_console.print(
                f"[red]{stream[:80]!r} is not a reply stream name: "
                f"{keys.reply_to_problem(stream)}[/]",
                highlight=False,
            )
            raise typer.Exit(2)
        settings = get_settings()
        client = redis_client(settings.redis_url)
        entries = follow_stream(client, stream) if follow else read_stream(client, stream)
        try:
            for entry in entries:
                if entry is not None:
                    typer.echo(entry.message)
        except KeyboardInterrupt:
            pass


def _submit_or_say_how_far(
    client: Client, jobs: list[Any], reply_to: str, chunk_size: int | None, pack: bool
) -> SubmitReport:
    """The batch submitted; on Ctrl-C, how many jobs went before it stopped (found by an
    attack: a Ctrl-C during a 100,000-job submit exited 130 with no word, 208 messages on the
    queue at the signal and 224 after). The count is of messages the publishing thread
    confirmed: it finishes what it was handed before the interrupt leaves ``submit_batch``."""
    queued = 0

    def sent(jobs_in_message: int) -> None:
        nonlocal queued
        queued += jobs_in_message

    try:
        return client.submit_batch(
            jobs, reply_to=reply_to, chunk_size=chunk_size, pack=pack, on_progress=sent
        )
    except KeyboardInterrupt:
        err_console.print(
            f"[red]interrupted: {queued} of {len(jobs)} job(s) queued, the others not[/]"
        )
        err_console.print(
            "submitting the same file again is safe: a job id runs once, the queued ones "
            "are answered once"
        )
        raise typer.Exit(130) from None  # the exit status of a Ctrl-C (worker.cli)


def reply_bound_s(settings: Settings, report: SubmitReport) -> float:
    """How long ``submit --wait`` waits without ``--timeout``: past it, a job will not reply.

    A job a worker took has its terminal message by its deadline plus the lease margin (an
    escalation at worst, once a reaper settles a dead worker's claim); one the broker lost is
    republished by a reaper a visibility timeout after it was submitted. A reaper round or
    two, and a little slack, on top of the later of the two."""
    left = 0.0
    if report.latest_deadline is not None:
        left = (report.latest_deadline - datetime.now(UTC)).total_seconds()
    taken = left + settings.lease_margin_s
    return max(taken, settings.visibility_timeout_s) + 2 * settings.reaper_interval_s + 10


def _report_missing(missing: list[str], waited_s: float, *, given: bool) -> None:
    shown = ", ".join(missing[:10]) + (
        f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
    )
    err_console.print(
        f"[yellow]{len(missing)} job(s) still without a reply after {waited_s:.0f} s:[/] {shown}"
    )
    if given:
        err_console.print("Wait longer with a larger --timeout, or follow the stream later.")
        return
    err_console.print(
        "By now each should have replied, if a worker took it. `decisions status` shows "
        "whether workers are running and how many jobs were submitted but never taken; "
        "a worker with DECISIONS_REAPER_INTERVAL_S=0 republishes none. Submitting the same "
        "file again is safe: the ledger never sends a request twice."
    )


def _safe_url(url: str) -> str:
    """A broker URL without its password (``shared.scrub``: one that does not parse too; a
    split of its own failed on ``redis:/:pw@host``, after the batch was submitted)."""
    return mask_url(url, keep_user=True)
