"""Writes examples/tickets.jsonl: 240 support tickets and a few deliberately invalid lines.

Each ticket asks three questions of one state: is it urgent (noul), which department
(choice, escalated to a person below 0.6 confidence) and how frustrated (score).
Run: python examples/make_tickets.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OPENINGS = [
    "Hi team,",
    "Hello,",
    "URGENT:",
    "Good morning,",
    "To whom it may concern,",
    "Hey there,",
    "Third email about this.",
    "Quick question:",
]
PROBLEMS = [
    "my payouts have been failing for {n} days",
    "I was charged twice for invoice #{inv}",
    "the API returns 502 on every call to /v2/orders since this morning",
    "I'd like a quote for {n} more seats on the enterprise plan",
    "the webhook integration stopped delivering events after your last release",
    "I need a refund for the annual plan I bought by mistake",
    "our dashboard shows last week's numbers only",
    "can you explain the difference between the Growth and Scale tiers?",
    "the export to CSV times out for accounts with more than {n} rows",
    "my card was declined although the bank says everything is fine",
    "the login page loops back to itself on Safari",
    "we want to move {n} users from the legacy plan before renewal",
]
CLOSINGS = [
    "Thanks.",
    "Please fix this today, customers are waiting.",
    "No rush.",
    "This is unacceptable.",
    "Appreciate your help!",
    "I am cancelling if this is not solved.",
    "Let me know.",
    "Regards, {name}",
]
NAMES = ["Ada", "Bo", "Chen", "Dara", "Elif", "Femi", "Goran", "Hana", "Ines", "Jon"]
PLANS = ["starter", "growth", "scale", "enterprise"]

QUESTIONS = {
    "is_urgent": {
        "type": "noul",
        "instructions": "Does this ticket convey urgency?",
        "criteria": {
            "true": "Explicitly time-sensitive or blocking",
            "false": "No urgency expressed",
        },
    },
    "department": {
        "type": "choice",
        "instructions": "Which team should handle this ticket?",
        "criteria": {
            "billing": "Payments, invoicing, refunds",
            "technical": "Bugs, outages, integrations",
            "sales": "Quotes, upgrades, plan questions",
            "account": None,
        },
        "escalate_below": 0.6,
    },
    "frustration": {
        "type": "score",
        "instructions": "How frustrated is the customer?",
        "criteria": ["Calm", "Mildly annoyed", "Frustrated", "Very angry"],
    },
}

INVALID_LINES = [
    # A score with a single level: the wire takes 2 to 10.
    {
        "id": "ticket-invalid-score",
        "kind": "decide",
        "state": "The app is slow.",
        "batch": "support-demo",
        "questions": {
            "frustration": {
                "type": "score",
                "instructions": "How frustrated?",
                "criteria": ["Calm"],
            }
        },
    },
    # A state that is a number: a state is a string, an object or an array.
    {
        "id": "ticket-invalid-state",
        "kind": "decide",
        "state": 42,
        "batch": "support-demo",
        "questions": {"is_urgent": {"type": "noul", "instructions": "Urgent?"}},
    },
    # An unknown question type.
    {
        "id": "ticket-invalid-type",
        "kind": "decide",
        "state": "Where is my order?",
        "batch": "support-demo",
        "questions": {"mood": {"type": "sentiment", "instructions": "Mood?"}},
    },
    # No questions at all.
    {
        "id": "ticket-invalid-empty",
        "kind": "decide",
        "state": "Hello?",
        "batch": "support-demo",
        "questions": {},
    },
    # A confidence floor above 1.
    {
        "id": "ticket-invalid-floor",
        "kind": "decide",
        "state": "Refund please.",
        "batch": "support-demo",
        "questions": {
            "department": {
                "type": "choice",
                "instructions": "Team?",
                "criteria": {"billing": None, "sales": None},
                "escalate_below": 1.5,
            }
        },
    },
]


def ticket(rng: random.Random, number: int) -> dict[str, object]:
    fill = {"n": rng.randint(2, 5000), "inv": rng.randint(10000, 99999), "name": rng.choice(NAMES)}
    body = " ".join(
        [
            rng.choice(OPENINGS),
            rng.choice(PROBLEMS).format(**fill) + ".",
            rng.choice(CLOSINGS).format(**fill),
        ]
    )
    return {
        "id": f"ticket-{number:04d}",
        "kind": "decide",
        "batch": "support-demo",
        "timeout_s": 60,
        "state": {
            "subject": body.split(".")[0][:60],
            "body": body,
            "customer": {"plan": rng.choice(PLANS), "tenure_months": rng.randint(0, 96)},
        },
        "questions": QUESTIONS,
        "metadata": {"queue": "support", "ticket_number": number},
    }


def main() -> None:
    rng = random.Random(20261201)
    lines = [json.dumps(ticket(rng, n), sort_keys=True) for n in range(1, 241)]
    for offset, bad in enumerate(INVALID_LINES):
        lines.insert(37 * (offset + 1), json.dumps(bad, sort_keys=True))
    lines.insert(100, '{"id": "ticket-truncated", "state": "this line was cut off')
    path = Path(__file__).with_name("tickets.jsonl")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} lines to {path}")


if __name__ == "__main__":
    main()
