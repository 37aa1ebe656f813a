"""tests/test_tickets.py: jobs in, results and an escalation out, requests counted."""

from worker.testing import DecisionsWorker, FauxBehaviourControl, ReplyStream, RequestCounts

TICKETS = [
    {
        "id": "ticket-1",
        "kind": "decide",
        "state": {"body": "Help! My payouts have been failing for 3 days."},
        "questions": {
            "is_urgent": {"type": "noul", "instructions": "Does this convey urgency?"},
            "department": {
                "type": "choice",
                "instructions": "Which team should handle this?",
                "criteria": {"billing": "Payments, refunds", "technical": "Bugs, outages"},
            },
        },
    },
    {
        "id": "ticket-2",
        "kind": "decide",
        "state": {"body": "Could you send me last month's invoice?"},
        "questions": {"is_urgent": {"type": "noul", "instructions": "Does this convey urgency?"}},
    },
]


def test_tickets_are_answered_or_escalated(
    decisions_worker: DecisionsWorker,
    faux_behaviour: FauxBehaviourControl,
    faux_counts: RequestCounts,
    reply_stream: ReplyStream,
) -> None:
    # The provider refuses ticket-2's question, as a real one may: a person must decide it.
    faux_behaviour.for_job("ticket-2", mode="refuse")

    replies = decisions_worker.submit(TICKETS)

    answered = replies["ticket-1"]
    assert answered.type == "result"
    assert answered.answers["department"].value in {"billing", "technical"}
    assert 0.0 <= answered.answers["is_urgent"].confidence <= 1.0
    refused = replies["ticket-2"]
    assert refused.type == "escalation" and refused.reason == "decision_refused"
    assert [e.job_id for e in reply_stream.escalations()] == ["ticket-2"]

    # One request per job reached the provider ...
    assert faux_counts.total == 2
    assert faux_counts.for_job("ticket-1") == 1
    # ... and the same jobs submitted again send nothing: the ledger has their outcomes.
    decisions_worker.submit(TICKETS)
    assert faux_counts.total == 2
    assert sorted(r.job_id for r in reply_stream.read()) == ["ticket-1", "ticket-2"]
