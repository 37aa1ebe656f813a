"""The calibration page: per question and model, the reliability diagram, the accuracy /
escalation trade-off and the suggested threshold; and the audit queue (open ``audit``
escalations, answered like any other on the escalations pages).

Labels come from the ledger (``worker.calibration``); the labels still on the label stream
are stored first, as ``decisions calibration`` does, so a reviewer's last answers show.
"""

from __future__ import annotations

import contextlib

import redis
import structlog
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response

from shared.errors import LedgerError
from shared.escalation_listing import list_open
from shared.labels import AUDIT_REASON
from shared.ledger_text import has_control_character
from worker.calibration import group_reports, store_label_stream
from worker.console.auth import Login
from worker.console.reliability import reliability_diagram
from worker.console.web import page, render, state_of
from worker.ledger.label_ops import LabelFilter

__all__ = ["calibration_page"]

log = structlog.get_logger("decisions.console")

#: The trade-off rows the page shows (the CLI shows every candidate).
_SHOWN = (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)


def _target(raw: str | None) -> float:
    try:
        value = float(raw) if raw else 0.95
    except ValueError:
        return 0.95
    return value if 0 < value < 1 else 0.95


@page
def calibration_page(request: Request, login: Login) -> Response:
    state = state_of(request)
    query = request.query_params
    target = _target(query.get("target"))
    where = LabelFilter(
        batch=query.get("batch") or None,
        question=query.get("question") or None,
        model=query.get("model") or None,
    )
    named = {"batch": where.batch, "question": where.question, "model": where.model}
    bad = sorted(name for name, value in named.items() if value and has_control_character(value))
    if bad:
        # No label is named so, and PostgreSQL refuses a NUL parameter: a DataError that read
        # as an outage (found by an attack).
        return render(
            request,
            "error.html",
            status=400,
            title="No such filter",
            message=f"{', '.join(bad)}: a name holds no control character.",
        )
    try:
        # Redis away: the stored labels are shown, the waiting ones next time.
        with contextlib.suppress(redis.RedisError):
            store_label_stream(state.ledger, state.queue.redis)
        groups = group_reports(state.ledger.labels(where), target=target)
    except (LedgerError, SQLAlchemyError) as exc:
        log.warning("console.ledger_unavailable", path=request.url.path, error=type(exc).__name__)
        return render(
            request,
            "error.html",
            status=503,
            title="Ledger unavailable",
            message=f"The ledger cannot be read right now ({type(exc).__name__}).",
        )
    audits = list_open(state.queue, reason=AUDIT_REASON, batch=where.batch)
    return render(
        request,
        "calibration.html",
        groups=[
            (g, reliability_diagram(g.report.bins),
             [r for r in g.report.thresholds if r.threshold in _SHOWN])
            for g in groups
        ],
        target=target,
        where=where,
        audits=audits.items,
        more_audits=audits.next_after is not None,
    )
