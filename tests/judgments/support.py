"""Shared pieces of the judgment tests: a batch of sift, route and verify jobs, the faux's
own answers as the oracle, and the packing the limits allow, computed here independently."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shared.canonical import canonical_bytes
from shared.replies import Reply, parse_reply
from shared.settings import Settings
from worker.testing.faux import answer_question

__all__ = [
    "BATCH",
    "REPLY_TO",
    "faux_noul",
    "replies",
    "route_job",
    "settings_for",
    "sift_job",
    "verified_job",
    "wire_item",
]

REPLY_TO = "judgments-test:replies"
BATCH = "judgments-test"
#: The faux key the Parallel provider sends (the faux checks only that there is one).
PARALLEL_TEST_KEY = "faux-parallel-no-secret"


def settings_for(tmp_path: Path, faux_url: str, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "ledger_url": f"sqlite:///{tmp_path / 'ledger.db'}",
        "faux_url": faux_url,
        "parallel_base_url": faux_url,
    }
    values.update(over)
    return Settings(_env_file=None, **values)


def sift_job(job_id: str, items: list[Any], **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "kind": "sift",
        "batch": BATCH,
        "reply_to": REPLY_TO,
        "items": items,
        "question": {"instructions": "Is this message spam?"},
        "state": "A shared mailbox of a small shop.",
    }
    job.update(fields)
    return job


def route_job(job_id: str, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": job_id,
        "kind": "route",
        "batch": BATCH,
        "reply_to": REPLY_TO,
        "state": f"Ticket {job_id}: my payouts have failed for three days.",
        "routes": {"billing": "Payments, refunds", "technical": "Bugs, outages"},
        "unsure": "human",
    }
    job.update(fields)
    return job


def verified_job(job_id: str, state: str, **verify: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "batch": BATCH,
        "reply_to": REPLY_TO,
        "state": state,
        "questions": {
            "urgent": {"type": "noul", "instructions": "Is this urgent?"},
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": None, "technical": None},
            },
        },
        "verify": verify,
    }


def wire_item(question: str, item: Any) -> dict[str, Any]:
    """An item's question as the documented shape says it goes on the wire."""
    return {"type": "noul", "instructions": {"question": question, "item": item}}


def faux_noul(model: str, question: dict[str, Any], state: Any) -> float:
    """p(yes) the faux answers for ``question`` about ``state`` (its answers are the oracle)."""
    answer = answer_question(model, question, state)
    return float(answer["noul"])


def system_one_capacity(state: Any, item_question: dict[str, Any], ids: int) -> int:
    """Items of one size that fit one System One request: the state plus all questions within
    64,000 tokens of 4 bytes; every id is ``item.<i>`` of ``ids`` digits at most."""
    envelope = len(canonical_bytes({"questions": {}, "state": state}))
    entry = len(f'"item.{"9" * ids}":'.encode()) + len(canonical_bytes(item_question)) + 1
    return (64_000 * 4 + 3 - envelope + 1) // entry


def requests_for(items: int, per_request: int) -> int:
    return math.ceil(items / per_request)


def replies(out: Path) -> dict[str, Reply]:
    """An embedded run's replies by job id, from the files it wrote in ``out``."""
    found: dict[str, Reply] = {}
    for name in ("results", "escalations", "rejected"):
        for line in (out / f"{name}.jsonl").read_text().splitlines():
            reply = parse_reply(line)
            found[reply.job_id] = reply
    return found
