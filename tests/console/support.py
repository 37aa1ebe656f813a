"""Escalations for the console's tests, published the way a worker publishes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from shared.job_parsing import parse_job
from shared.judgments import item_id
from shared.judgments.sift import sift_context
from shared.replies import Answer, EscalationMessage, EscalationReason, SiftItem
from shared.streams import publish_once
from shared.verdicts import escalation
from worker.ledger import CallOutcome, Ledger

__all__ = [
    "REDIS_DB",
    "REPLIES",
    "decide_job",
    "finished_job",
    "menu_escalation",
    "publish",
    "refused_escalation",
    "sift_escalation",
]

#: The console's tests own this Redis database (emptied before and after each use).
REDIS_DB = 14
REPLIES = "console-test:replies"

QUESTIONS: dict[str, Any] = {
    "urgent": {"type": "noul", "instructions": "Urgent?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": "Payments", "sales": None},
    },
    "mood": {"type": "score", "instructions": "Mood?", "criteria": ["calm", "cross", "livid"]},
}


def decide_job(job_id: str, *, batch: str = "b1", state: Any = "a ticket") -> Any:
    return parse_job(
        {"id": job_id, "reply_to": REPLIES, "batch": batch, "state": state, "questions": QUESTIONS}
    )


def refused_escalation(
    job_id: str,
    *,
    reason: EscalationReason = "decision_refused",
    batch: str = "b1",
    state: Any = "a ticket",
) -> EscalationMessage:
    """The provider answered urgent and mood, and refused team."""
    answers = {
        "urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8),
        "team": Answer(type="choice", refused=True),
        "mood": Answer(type="score", value=1.2, label="cross", confidence=0.9),
    }
    return escalation(decide_job(job_id, batch=batch, state=state), reason, "test", [], answers)


MENU_OPTIONS: list[dict[str, Any]] = [
    {"kind": "value", "name": "done", "value": "CONVERSATION_OVER", "description": "Stop here"},
    {
        "kind": "schema",
        "name": "plan",
        "description": "Produce a plan",
        "schema": {
            "type": "object",
            "fields": [
                {"name": "title", "type": "str"},
                {"name": "priority", "type": "str", "options": ["low", "high"]},
                {"name": "steps", "type": "int"},
            ],
        },
    },
]


def menu_escalation(job_id: str, *, batch: str = "b1") -> EscalationMessage:
    return EscalationMessage(
        job_id=job_id,
        batch=batch,
        kind="menu",
        reason="menu_unparseable",
        detail="no valid pick after 2 attempt(s)",
        context={
            "menu": "Pick one way to go on.\n- done: Stop here\n- plan: Produce a plan",
            "last_reply": "I think we should <b>plan</b> something",
            "options": MENU_OPTIONS,
        },
        reply_to=REPLIES,
    )


def publish(r: redis.Redis, message: EscalationMessage) -> None:
    publish_once(
        r,
        stream=message.reply_to or REPLIES,
        job_id=message.job_id,
        message_type="escalation",
        message_json=message.to_json(),
        escalation=True,
    )


def finished_job(ledger: Ledger, job_id: str, batch: str, *, status: str = "answered") -> None:
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    ledger.open_job(
        job_id=job_id,
        kind="decide",
        batch=batch,
        reply_to=REPLIES,
        fingerprint=job_id,
        deadline=deadline,
        job_json="{}",
    )
    ledger.claim(
        job_id=job_id,
        step="decide",
        provider="faux",
        model=None,
        request_sha256=None,
        lease_expires=deadline,
    )
    outcome = CallOutcome(step="decide", status=status, cost_usd=0.001, cost_basis="estimate")  # type: ignore[arg-type]
    kind, reason = (
        ("result", None) if status == "answered" else ("escalation", "decision_interrupted")
    )
    ledger.finish_job(
        job_id=job_id, message_type=kind, reason=reason, message_json="{}", outcome=outcome
    )


def sift_escalation(
    job_id: str, items: int, *, decided: int = 0, batch: str = "b1", reply_to: str = REPLIES
) -> EscalationMessage:
    """A sift of ``items`` tickets whose first ``decided`` items the machine answered (even
    indexes yes) and refused the rest, escalated as a worker escalates it."""
    job = parse_job(
        {
            "id": job_id,
            "kind": "sift",
            "reply_to": reply_to,
            "batch": batch,
            "items": [f"ticket {i}: <b>refund</b> please" for i in range(items)],
            "question": {"type": "noul", "instructions": "Does it ask for a refund?"},
        }
    )
    answers = {
        item_id(i): Answer(type="noul", value=i % 2 == 0, probability=0.9, confidence=0.9)
        for i in range(decided)
    }
    sift_items = [
        SiftItem(index=i, status="decided", keep=i % 2 == 0, probability=0.9, confidence=0.9)
        if i < decided
        else SiftItem(index=i, status="refused")
        for i in range(items)
    ]
    return EscalationMessage(
        job_id=job_id,
        batch=batch,
        kind="sift",
        reason="decision_refused",
        detail=f"{items - decided} refused",
        context=sift_context(job),
        answers=answers,
        reply_to=reply_to,
        items=sift_items,
    )
