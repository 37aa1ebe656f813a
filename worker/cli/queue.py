"""``decisions submit`` and ``decisions results``: a producer's and a consumer's commands."""

from __future__ import annotations

from pathlib import Path

import redis
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shared.client import Client
from shared.settings import get_settings
from shared.streams import follow_stream, read_stream
from worker.cli.console import console, err_console
from worker.cli.jsonl import read_jobs
from worker.judgments import judgment_checker
from worker.judgments.dryrun import print_report, report_json, worker_prices
from worker.menus.submit import job_checker
from worker.providers import ProviderRegistry
from worker.runtimes import RuntimeRegistry

__all__ = ["register"]


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
        chunk_size: int | None = typer.Option(None, "--chunk-size", help="jobs per Celery message"),
        timeout: float | None = typer.Option(
            None, "--timeout", help="give up waiting after this many s"
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
        settings = get_settings()
        providers = ProviderRegistry.from_settings(settings)
        checker = judgment_checker(
            providers, job_checker(providers, RuntimeRegistry.from_settings(settings))
        )
        client = Client(settings, checker=checker)
        jobs = read_jobs(file)
        estimate = client.estimate(
            jobs, reply_to=reply_to, prices=worker_prices(settings, price), pack=pack
        )
        if dry_run:
            if as_json:
                typer.echo(report_json(estimate))
            else:
                print_report(estimate, console, err_console)
            return
        report = client.submit_batch(
            jobs, reply_to=reply_to, chunk_size=chunk_size, pack=pack
        )
        console.print(
            f"submitted {len(report.job_ids)} job(s) in {report.messages} message(s) to "
            f"{_safe_url(settings.broker_url)}; rejected {len(report.rejected)}; "
            f"replies on {reply_to!r}"
        )
        for job_id, problems in report.rejected.items():
            listed = "; ".join(f"{p.field}: {p.message}" for p in problems)
            err_console.print(f"[yellow]rejected[/] {job_id}: {listed}")
        if not wait:
            return
        wanted = set(report.job_ids)
        counts: dict[str, int] = {}
        with Progress(
            TextColumn("[bold]replies"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("replies", total=len(wanted))
            for reply in client.replies(reply_to, job_ids=wanted, timeout_s=timeout):
                counts[reply.type] = counts.get(reply.type, 0) + 1
                progress.advance(task)
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
        settings = get_settings()
        client = redis.Redis.from_url(settings.redis_url)
        entries = follow_stream(client, stream) if follow else read_stream(client, stream)
        try:
            for entry in entries:
                if entry is not None:
                    typer.echo(entry.message)
        except KeyboardInterrupt:
            pass


def _safe_url(url: str) -> str:
    """A broker URL without its password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
