"""The decisions every scenario sends: one shape of decide job for the faux provider."""

from __future__ import annotations

from typing import Any

__all__ = ["QUESTIONS", "decide_jobs"]

QUESTIONS: dict[str, Any] = {
    "urgent": {"type": "noul", "instructions": "Does this ticket convey urgency?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle it?",
        "criteria": {"billing": "Payments and refunds", "sales": None, "technical": None},
    },
    "mood": {
        "type": "score",
        "instructions": "How frustrated is the customer?",
        "criteria": ["calm", "annoyed", "angry"],
    },
}


def decide_jobs(prefix: str, n: int, *, timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """``n`` distinct jobs (ids ``prefix-000000`` on), each one paid call to the faux."""
    return [
        {
            "id": f"{prefix}-{i:06d}",
            "kind": "decide",
            "batch": prefix,
            "state": {"subject": f"ticket {i}", "body": "The invoice is wrong, please help."},
            "questions": QUESTIONS,
            "timeout_s": timeout_s,
        }
        for i in range(n)
    ]
