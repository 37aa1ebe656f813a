"""A route job's terminal message from its one call.

The model's route stands when it answered with a confidence at or above the ``floor``
(``route_reason: "chosen"``). A refusal (``refused``) or a confidence below the floor
(``low_confidence``) takes the ``unsure`` route when the job names one, as a ``result`` with
that reason; without one they escalate as any decision does (``decision_refused``,
``low_confidence``). A call whose outcome is unknown (the worker died mid-call, a read
timeout after sending, an expired lease) escalates ``decision_interrupted`` for a person
either way, as every lost call does: it is never sent again (it may have been billed), and
``unsure`` is a judgment the model made about the state, which a lost call never is. A call
that failed or was not sent escalates either way too: that is about the provider, not the
state.
"""

from __future__ import annotations

from typing import Any

from shared.jobs import RouteJob
from shared.judgments import ROUTE_QUESTION_ID, route_question
from shared.judgments.steps import StepResult
from shared.replies import (
    Answer,
    EscalationMessage,
    EscalationReason,
    Receipt,
    ResultMessage,
    RouteReason,
    TerminalMessage,
)

__all__ = ["route_message"]



def route_message(job: RouteJob, result: StepResult) -> TerminalMessage:
    receipts = [result.receipt] if result.receipt is not None else []
    answers: dict[str, Answer] | None = None
    if result.status == "answered":
        answer = (result.answers or {}).get(ROUTE_QUESTION_ID)
        answers = {ROUTE_QUESTION_ID: answer} if answer is not None else {}
        if answer is None or answer.refused:
            return _unsure(
                job, "refused", "decision_refused", "the provider refused", receipts, answers
            )
        confidence = answer.confidence
        if job.floor is not None and (confidence is None or confidence < job.floor):
            shown = "none" if confidence is None else f"{confidence:.2f}"
            return _unsure(
                job,
                "low_confidence",
                "low_confidence",
                f"confidence {shown} is below the floor of {job.floor:g}",
                receipts,
                answers,
            )
        return _result(job, str(answer.value), "chosen", receipts, answers)
    # An unknown outcome (never sent again) escalates like any other: see the docstring.
    return _escalation(job, result.reason, result.detail, receipts, None)


def _unsure(
    job: RouteJob,
    why: RouteReason,
    reason: EscalationReason,
    detail: str,
    receipts: list[Receipt],
    answers: dict[str, Answer] | None,
) -> TerminalMessage:
    if job.unsure is not None:
        return _result(job, job.unsure, why, receipts, answers)
    return _escalation(job, reason, detail, receipts, answers)


def _result(
    job: RouteJob,
    route: str,
    why: RouteReason,
    receipts: list[Receipt],
    answers: dict[str, Answer] | None,
) -> ResultMessage:
    return ResultMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=receipts,
        kind="route",
        value=route,
        route_reason=why,
        answers=answers,
    )


def _escalation(
    job: RouteJob,
    reason: EscalationReason,
    detail: str,
    receipts: list[Receipt],
    answers: dict[str, Answer] | None,
) -> EscalationMessage:
    return EscalationMessage(
        job_id=job.id,
        batch=job.batch,
        metadata=job.metadata,
        receipts=receipts,
        kind="route",
        reason=reason,
        detail=detail,
        context=route_context(job),
        answers=answers,
        reply_to=job.reply_to,
    )


def route_context(job: RouteJob) -> dict[str, Any]:
    """What a reviewer answers: the route question (``route``) about the state."""
    question = route_question(job.routes, job.instructions).model_dump(
        mode="json", exclude_none=True
    )
    question["criteria"] = dict(job.routes)
    if job.floor is not None:
        question["escalate_below"] = job.floor
    return {
        "questions": {ROUTE_QUESTION_ID: question},
        "state": job.state,
        "provider": job.provider,
        "model": job.model,
        "unsure": job.unsure,
        # The images a ``<key>`` token names, for the reviewer (the console shows them).
        **(
            {}
            if job.images is None
            else {"assets": {k: i.shown() for k, i in job.images.items()}}
        ),
    }
