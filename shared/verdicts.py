"""From a decide job's answers (or failure) to its terminal message.

A refused answer never decodes to a value: it escalates ``decision_refused``. An answer whose
confidence is below its question's ``escalate_below`` escalates ``low_confidence`` with the
answers attached; a calibrated floor is the threshold its labels suggest (``floors``), named
on the deciding call's receipt. Otherwise the job has its ``result``. What a provider
failure means for the ledger and the escalation is the delivery protocol's
(``worker.delivery.call_status``, ``failure_reason``).
"""

from __future__ import annotations

from typing import Any, Protocol

from shared.jobs import DecideJob
from shared.questions import CalibratedFloor
from shared.replies import (
    Answer,
    EscalationMessage,
    EscalationReason,
    Receipt,
    ResultMessage,
    TerminalMessage,
    Threshold,
)

__all__ = ["ThresholdSource", "decide_context", "escalation", "floors", "verdict"]



class ThresholdSource(Protocol):
    """Where a calibrated floor's threshold comes from (``worker.calibration.ThresholdBook``)."""

    def threshold(
        self,
        question: str,
        floor: CalibratedFloor,
        provider: str,
        model: str | None,
        question_type: str | None = None,
    ) -> Threshold: ...


def floors(
    job: DecideJob, receipts: list[Receipt], source: ThresholdSource | None
) -> dict[str, Threshold]:
    """The threshold of each question with a calibrated floor, for the model that answered
    (its receipt); the fallback, from no labels, when there is no source."""
    out: dict[str, Threshold] = {}
    receipt = _deciding(receipts)
    for qid, question in job.questions.items():
        floor = question.escalate_below
        if not isinstance(floor, CalibratedFloor):
            continue
        if source is None or receipt is None:
            out[qid] = Threshold(
                value=floor.fallback, source="fallback", target=floor.calibrated, labels=0
            )
        else:
            out[qid] = source.threshold(
                qid, floor, receipt.provider, receipt.model, question_type=question.type
            )
    return out


def _deciding(receipts: list[Receipt]) -> Receipt | None:
    return next((r for r in receipts if r.step == "decide"), receipts[0] if receipts else None)


def _with_thresholds(receipts: list[Receipt], used: dict[str, Threshold]) -> list[Receipt]:
    """The receipts, the deciding call's saying which calibrated floors it was judged by."""
    receipt = _deciding(receipts)
    if not used or receipt is None:
        return receipts
    return [r.model_copy(update={"thresholds": used}) if r is receipt else r for r in receipts]


def decide_context(job: DecideJob) -> dict[str, Any]:
    """What a reviewer needs to answer in the machine's place."""
    return {
        "questions": {
            qid: q.model_dump(mode="json", exclude_none=True) for qid, q in job.questions.items()
        },
        "state": job.state,
        "provider": job.provider,
        "model": job.model,
        # The images a ``<key>`` token names, for the reviewer (the console shows them).
        **(
            {}
            if job.images is None
            else {"assets": {k: i.shown() for k, i in job.images.items()}}
        ),
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


def verdict(
    job: DecideJob,
    answers: dict[str, Answer],
    receipts: list[Receipt],
    thresholds: ThresholdSource | None = None,
) -> TerminalMessage:
    used = floors(job, receipts, thresholds)
    receipts = _with_thresholds(receipts, used)
    refused = sorted(qid for qid, a in answers.items() if a.refused)
    missing = sorted(set(job.questions) - set(answers))
    if refused or missing:
        names = ", ".join(refused + missing)
        return escalation(
            job, "decision_refused", f"the provider refused: {names}", receipts, answers
        )
    low = []
    for qid, question in job.questions.items():
        floor = used[qid].value if qid in used else question.escalate_below
        assert not isinstance(floor, CalibratedFloor)
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
