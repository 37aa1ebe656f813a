"""A provider's hostile answers through the whole worker (the plugin's in-process worker and
faux): JSON nested deeper than Python's parser goes is a person's decision, sent once, and
the jobs beside it are answered as usual."""

from __future__ import annotations

from typing import Any

from worker.testing import DecisionsWorker, FauxBehaviourControl, RequestCounts


def _ticket(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "decide",
        "state": f"ticket {job_id}: my payouts fail",
        "questions": {"is_urgent": {"type": "noul", "instructions": "Urgent?"}},
    }


def test_json_nested_too_deep_is_escalated_once_and_its_neighbours_answered(
    decisions_worker: DecisionsWorker,
    faux_behaviour: FauxBehaviourControl,
    faux_counts: RequestCounts,
) -> None:
    faux_behaviour.for_job("t-deep", mode="deep_json")
    replies = decisions_worker.submit([_ticket("t-before"), _ticket("t-deep"), _ticket("t-after")])
    assert replies["t-before"].type == "result" and replies["t-after"].type == "result"
    deep = replies["t-deep"]
    assert deep.type == "escalation", deep
    assert "nested too deep" in (deep.detail or "")
    assert faux_counts.by_call() == {"t-before/decide": 1, "t-deep/decide": 1, "t-after/decide": 1}
