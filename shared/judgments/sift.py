"""A sift job's terminal message from the results of its packed requests.

Per item: ``decided`` (``keep`` is p(yes) >= 0.5, as the decoded answer says), ``refused``
(the provider declined the item's question, or left it out), ``interrupted`` (its request's
outcome is unknown: never sent again), ``failed`` or ``not_sent``. Each item's
``cost_share_usd`` is its request's cost over the request's items (null when the cost is
unknown). Every item decided, none below the question's floor: a ``result`` whose ``value`` is
the indexes of the kept items. Otherwise an ``escalation`` with every item attached, the
decided answers, and the questions of every item for the reviewer, by one reason: an
interrupted request first (a person must know something may have been paid and lost), then
a deadline, a failed request, a refusal, a low confidence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from shared.jobs import SiftJob
from shared.judgments import item_id, item_index, sift_question, sift_state
from shared.judgments.step_errors import distinct_errors
from shared.judgments.steps import PlannedStep, StepResult
from shared.questions import fixed_floor
from shared.replies import (
    Answer,
    EscalationMessage,
    EscalationReason,
    Receipt,
    ResultMessage,
    SiftItem,
    SiftItemStatus,
    TerminalMessage,
)

__all__ = ["sift_message"]


_STATUS: dict[str, SiftItemStatus] = {
    "failed": "failed",
    "not_sent": "not_sent",
    "late": "not_sent",
    "unknown": "interrupted",
}


def sift_message(
    job: SiftJob, plan: Sequence[PlannedStep], results: list[StepResult]
) -> TerminalMessage:
    items: dict[int, SiftItem] = {}
    answers: dict[str, Answer] = {}
    receipts: list[Receipt] = []
    reasons: Counter[EscalationReason] = Counter()
    for planned, result in zip(plan, results, strict=True):
        if result.receipt is not None:
            receipts.append(result.receipt)
        share, basis = _share(result.receipt, len(planned.question_ids))
        for qid in planned.question_ids:
            index = item_index(qid)
            assert index is not None
            answer = (result.answers or {}).get(qid) if result.status == "answered" else None
            if result.status == "answered" and (answer is None or answer.refused):
                status: SiftItemStatus = "refused"
                reasons["decision_refused"] += 1
            elif result.status != "answered":
                status = _STATUS[result.status]
                reasons[result.reason] += 1
            else:
                status = "decided"
            decided = answer if status == "decided" else None
            if decided is not None:
                answers[qid] = decided
            items[index] = SiftItem(
                index=index,
                status=status,
                keep=None if decided is None else bool(decided.value),
                probability=None if decided is None else decided.probability,
                confidence=None if decided is None else decided.confidence,
                confidence_source=None if decided is None else decided.confidence_source,
                step=planned.step,
                cost_share_usd=share,
                cost_basis=basis,
            )
    ordered = [items[i] for i in sorted(items)]
    floor = fixed_floor(job.question.escalate_below)
    low = [
        i.index for i in ordered
        if i.status == "decided" and floor is not None
        and (i.confidence is None or i.confidence < floor)
    ]
    if low:
        reasons["low_confidence"] += len(low)
    if not reasons:
        return ResultMessage(
            job_id=job.id, batch=job.batch, metadata=job.metadata, receipts=receipts,
            kind="sift", value=[i.index for i in ordered if i.keep], items=ordered,
        )
    reason = _first_reason(reasons)
    counts = Counter(i.status for i in ordered)
    detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if low:
        detail += f"; {len(low)} below the floor of {floor:g}"
    # Each distinct error once: a big sift's requests tend to fail all the same way.
    results_detail = distinct_errors(
        (r.step, len(p.question_ids), r.detail)
        for p, r in zip(plan, results, strict=True)
        if r.status != "answered" and r.detail
    )
    if results_detail:
        detail += f" ({results_detail})"
    return EscalationMessage(
        job_id=job.id, batch=job.batch, metadata=job.metadata, receipts=receipts,
        kind="sift", reason=reason, detail=detail, context=sift_context(job),
        answers=answers, reply_to=job.reply_to, items=ordered,
    )


_ORDER: tuple[EscalationReason, ...] = (
    "decision_interrupted",
    "deadline_exceeded",
    "budget_exhausted",
    "provider_error",
    "decision_refused",
    "low_confidence",
)


def _first_reason(reasons: Counter[EscalationReason]) -> EscalationReason:
    return next((r for r in _ORDER if reasons[r]), next(iter(reasons)))


def _share(receipt: Receipt | None, items: int) -> tuple[float | None, Any]:
    if receipt is None or receipt.cost_usd is None:
        return None, None
    return round(receipt.cost_usd / items, 12), receipt.cost_basis


def _assets(job: SiftJob) -> dict[str, Any]:
    return {k: i.shown() for k, i in (job.images or {}).items()}


def sift_context(job: SiftJob) -> dict[str, Any]:
    """What a reviewer answers: each item's question (``item.<i>``, with the floor), the state."""
    floor = fixed_floor(job.question.escalate_below)
    questions = {}
    for i, item in enumerate(job.items):
        question = sift_question(job.question, item)
        if floor is not None:
            question["escalate_below"] = floor
        questions[item_id(i)] = question
    return {
        "questions": questions,
        "state": sift_state(job.state),
        "provider": job.provider,
        "model": job.model,
        # The images a ``<key>`` token names, for the reviewer (the console shows them).
        **({} if job.images is None else {"assets": _assets(job)}),
    }
