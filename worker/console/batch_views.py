"""The batches pages: every batch in the ledger, and one batch's progress, cost and stragglers."""

from __future__ import annotations

from datetime import UTC, datetime

import redis
import structlog
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response

from shared.audit import batch_audit
from shared.errors import LedgerError
from shared.escalation_listing import list_open
from shared.ledger_text import has_control_character
from shared.submit_rejections import submit_rejections
from worker.console.auth import Login
from worker.console.chart import progress_chart
from worker.console.figures import batch_report, list_batches
from worker.console.web import page, render, state_of

__all__ = ["batch_detail", "batch_list"]

log = structlog.get_logger("decisions.console")

#: The batch page reloads itself (no script needed) so a running batch is seen moving.
REFRESH_S = 10


@page
def batch_list(request: Request, login: Login) -> Response:
    state = state_of(request)
    try:
        batches = list_batches(state.ledger)
    except (LedgerError, SQLAlchemyError) as exc:
        return _ledger_down(request, exc)
    estimates = {b.batch: state.estimates.estimate(b.batch) for b in batches if b.batch}
    at_submit = {b.batch: _at_submit(state.queue.redis, b.batch) for b in batches if b.batch}
    return render(
        request, "batches.html", batches=batches, estimates=estimates, at_submit=at_submit
    )


@page
def batch_detail(request: Request, login: Login) -> Response:
    batch = request.query_params.get("batch", "")
    if not batch:
        return render(request, "error.html", status=404, title="No batch", message="Name a batch.")
    if has_control_character(batch):
        # No batch is named so (jobs refuse it), and PostgreSQL refuses a NUL parameter: a
        # DataError that read as an outage (found by an attack).
        return render(
            request,
            "error.html",
            status=404,
            title="No such batch",
            message="A batch's name holds no control character.",
        )
    state = state_of(request)
    try:
        report = batch_report(state.ledger, batch, datetime.now(UTC))
        budget = state.ledger.budget(batch)
        escalations = list_open(state.queue, batch=batch)
        actions = batch_audit(state.queue.redis, batch)
    except (LedgerError, SQLAlchemyError) as exc:
        return _ledger_down(request, exc)
    at_submit = _at_submit(state.queue.redis, batch)
    if report.status.jobs_total == 0 and not at_submit:
        return render(
            request,
            "error.html",
            status=404,
            title="No such batch",
            message="The ledger has no job in that batch.",
        )
    return render(
        request,
        "batch.html",
        report=report,
        chart=progress_chart(report.timeline),
        estimate=state.estimates.estimate(batch),
        budget=budget,
        at_submit=at_submit,
        # A page's worth, counted: "100+" when more are open (the list pages the rest).
        open_escalations=f"{len(escalations.items)}{'+' if escalations.next_after else ''}"
        if escalations.items
        else None,
        audit=actions,
        refresh_s=REFRESH_S if report.status.jobs_open else None,
    )


def _at_submit(client: redis.Redis, batch: str) -> int | None:
    """The batch's lines rejected at submit (never in the ledger); None: Redis is out of reach."""
    try:
        return submit_rejections(client, batch)
    except redis.RedisError:
        return None


def _ledger_down(request: Request, exc: Exception) -> Response:
    # The class name only: a driver's message can carry a connection string.
    log.warning("console.ledger_unavailable", path=request.url.path, error=type(exc).__name__)
    return render(
        request,
        "error.html",
        status=503,
        title="Ledger unavailable",
        message=f"The ledger cannot be read right now ({type(exc).__name__}).",
    )
