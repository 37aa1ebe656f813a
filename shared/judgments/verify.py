"""A verified decide job's terminal message: the decision, checked by independent ones.

The decision is judged first as any decide job's (``shared.verdicts.verdict``): a refusal,
a low confidence or a failed call escalates as usual and nothing is verified (a person
decides anyway). Otherwise every verifying decision is made, and each must agree with it on
every question: a ``noul`` on the same side of 0.5, a ``choice`` on the same option, a
``score`` on the same nearest level (half up, as its ``label``). All agree: the ``result``,
with every receipt and every verification. One disagrees: ``verification_failed``, with every
answer attached. A verification that brought no answer (refused, interrupted, failed, too
late) escalates by its own reason, the verifications attached.
"""

from __future__ import annotations

import math

from shared.jobs import DecideJob
from shared.judgments.steps import PlannedStep, StepResult
from shared.replies import (
    Answer,
    Receipt,
    ResultMessage,
    TerminalMessage,
    Verification,
)
from shared.verdicts import ThresholdSource, escalation, verdict

__all__ = ["agrees", "primary_message", "verified_message"]



def primary_message(
    job: DecideJob, result: StepResult, thresholds: ThresholdSource | None = None
) -> TerminalMessage:
    """The decision's own verdict (a result is then verified)."""
    receipts = [result.receipt] if result.receipt is not None else []
    if result.answers is not None:
        return verdict(job, result.answers, receipts, thresholds)
    return escalation(job, result.reason, result.detail, receipts)


def agrees(first: Answer, second: Answer) -> bool:
    if first.refused or second.refused or first.type != second.type:
        return False
    if first.type == "score":
        if not isinstance(first.value, int | float) or not isinstance(second.value, int | float):
            return False
        return _level(float(first.value)) == _level(float(second.value))
    return first.value == second.value


def _level(score: float) -> int:
    return math.floor(score + 0.5)


def verified_message(
    job: DecideJob,
    primary: ResultMessage,
    plan: tuple[PlannedStep, ...],
    results: list[StepResult],
) -> TerminalMessage:
    answers = primary.answers or {}
    receipts: list[Receipt] = list(primary.receipts)
    checks: list[Verification] = []
    failed: StepResult | None = None
    for planned, result in zip(plan, results, strict=True):
        if result.receipt is not None:
            receipts.append(result.receipt)
        theirs = result.answers
        missing = [] if theirs is None else sorted(
            qid for qid in job.questions if qid not in theirs or theirs[qid].refused
        )
        if theirs is None or missing:
            failed = failed or result
            checks.append(_verification(planned, result, None, []))
            continue
        differ = sorted(qid for qid, a in answers.items() if not agrees(a, theirs[qid]))
        checks.append(_verification(planned, result, not differ, differ))
    if failed is not None:
        refused = failed.answers is not None
        reason = "decision_refused" if refused else failed.reason
        detail = (
            f"{failed.step}: the verifying provider refused" if refused else failed.detail
        )
        message = escalation(job, reason, detail, receipts, answers)
        return message.model_copy(update={"verifications": checks})
    against = [c for c in checks if not c.agrees]
    if against:
        detail = "; ".join(
            f"{c.step} ({c.provider}, {c.model}) disagrees on {', '.join(c.disagreements)}"
            for c in against
        )
        message = escalation(job, "verification_failed", detail, receipts, answers)
        return message.model_copy(update={"verifications": checks})
    return primary.model_copy(update={"receipts": receipts, "verifications": checks})


def _verification(
    planned: PlannedStep, result: StepResult, agree: bool | None, differ: list[str]
) -> Verification:
    status = "not_sent" if result.status == "late" else result.status
    return Verification(
        step=planned.step,
        provider=planned.provider_name,
        model=result.receipt.model if result.receipt else planned.model,
        status=status,
        answers=result.answers,
        agrees=agree,
        disagreements=differ,
    )
