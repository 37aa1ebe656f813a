"""From a decide job's answers (or failure) to its terminal message.

A refused answer never decodes to a value: it escalates ``decision_refused``. An answer whose
confidence is below its question's ``escalate_below`` escalates ``low_confidence`` with the
answers attached. Otherwise the job has its ``result``.
"""

from __future__ import annotations

from typing import Any

from shared.errors import DecisionProviderError
from shared.jobs import DecideJob
from shared.replies import Answer, EscalationMessage, EscalationReason, Receipt, ResultMessage

__all__ = [
    "escalation",
    "failure_reason",
    "ledger_status_for",
    "verdict",
]

Message = ResultMessage | EscalationMessage

#: What the ledger records for a failed call, by provider error code.
_LEDGER_STATUS = {
    "outcome_unknown": "unknown",
    "connection": "not_sent",
    "rate_limited": "not_sent",
    "configuration": "not_sent",
    "aborted": "not_sent",
    "timeout": "not_sent",
    "auth": "failed",
    "invalid_request": "failed",
    "invalid_response": "failed",
}

_REASON: dict[str, EscalationReason] = {
    "outcome_unknown": "decision_interrupted",
    "timeout": "deadline_exceeded",
}


def ledger_status_for(error: DecisionProviderError) -> str:
    return _LEDGER_STATUS.get(error.code, "unknown")


def failure_reason(error: DecisionProviderError) -> EscalationReason:
    return _REASON.get(error.code, "provider_error")


def decide_context(job: DecideJob) -> dict[str, Any]:
    """What a reviewer needs to answer in the machine's place."""
    return {
        "questions": {
            qid: q.model_dump(mode="json", exclude_none=True) for qid, q in job.questions.items()
        },
        "state": job.state,
        "provider": job.provider,
        "model": job.model,
    }


def escalation(
    job: DecideJob,
    reason: EscalationReason,
    detail: str,
    receipts: list[Receipt],
    answers: dict[str, Answer] | None = None,
) -> EscalationMessage:
    return EscalationMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=receipts,
        reason=reason,
        detail=detail,
        context=decide_context(job),
        answers=answers,
        reply_to=job.reply_to,
    )


def verdict(job: DecideJob, answers: dict[str, Answer], receipts: list[Receipt]) -> Message:
    refused = sorted(qid for qid, a in answers.items() if a.refused)
    missing = sorted(set(job.questions) - set(answers))
    if refused or missing:
        names = ", ".join(refused + missing)
        return escalation(
            job, "decision_refused", f"the provider refused: {names}", receipts, answers
        )
    low = []
    for qid, question in job.questions.items():
        floor = question.escalate_below
        confidence = answers[qid].confidence
        if floor is not None and (confidence is None or confidence < floor):
            low.append(f"{qid} ({_fmt(confidence)} < {floor:g})")
    if low:
        return escalation(
            job, "low_confidence", "below the floor: " + ", ".join(low), receipts, answers
        )
    return ResultMessage(
        job_id=job.id, batch=job.batch, metadata=job.metadata, receipts=receipts, answers=answers
    )


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"
