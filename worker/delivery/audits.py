"""Audits of the confident side: a share of a batch's results also goes to the reviewers.

A decide job may carry ``audit_rate``; a job whose result (not an escalation) is picked by
``shared.labels.audited`` (a hash of its id: every delivery, relay and replay picks the
same jobs) gets an ``audit`` escalation on the escalation stream, published in the same
publish-once call as its result (``shared.streams``), so the result is not held back and
the audit is there once per job. The audit is built from the stored row (the outbox), not
from a delivery's state, so a relay or ``decisions ledger republish`` rebuilds the same one.

Without audits, labels come only from low-confidence answers: what a floor lets through is
never checked, and a calibration measured on escalations alone is biased.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.labels import AUDIT_REASON, audited
from shared.replies import EscalationMessage, ResultMessage, parse_reply
from shared.verdicts import decide_context
from worker.ledger import JobRow

__all__ = ["audit_json"]


def audit_json(row: JobRow) -> str | None:
    """The audit escalation of a finished job's stored result, as JSON; None when the job
    is not audited (no rate, not picked, not a decide result, or nothing it could label)."""
    if row.terminal_type != "result" or row.terminal_message is None:
        return None
    # Most jobs carry no audit rate: tell without parsing the whole job.
    if '"audit_rate":' not in row.job_json or '"audit_rate":null' in row.job_json:
        return None
    try:
        raw: Any = json.loads(row.job_json)
        rate = raw.get("audit_rate") if isinstance(raw, dict) else None
        if not isinstance(rate, int | float) or not audited(row.job_id, rate):
            return None
        job = parse_job(raw)
        result = parse_reply(row.terminal_message)
    except (ValueError, ValidationError):
        return None  # stored by an older release in a shape this one cannot read: no audit
    if not isinstance(job, DecideJob) or not isinstance(result, ResultMessage):
        return None
    if not result.answers:
        return None
    audit = EscalationMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=result.receipts,
        # The result's time, so the audit is the same message however often it is rebuilt.
        created_at=result.created_at,
        reason=AUDIT_REASON,
        detail=f"an audit of a confident result (audit_rate {rate:g}); the result was sent",
        context={**decide_context(job), "audit_rate": rate},
        answers=result.answers,
        reply_to=job.reply_to,
    )
    return audit.to_json()
