"""Escalations for the console's tests, published the way a worker publishes them."""

from __future__ import annotations

from typing import Any

import redis

from shared.jobs import parse_job
from shared.replies import Answer, EscalationMessage, EscalationReason
from shared.streams import publish_once
from worker.verdicts import escalation

__all__ = ["REDIS_DB", "REPLIES", "decide_job", "menu_escalation", "publish", "refused_escalation"]

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
