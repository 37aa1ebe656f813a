"""A job submitted again after a reviewer resolved its escalation is replayed to its reply
stream, never put back in the reviewers' queue, even by a Redis that forgot its resolved
records: the ledger's resolutions say so (found by an attack on ``republish``; the replay of
a resubmitted job took the same path)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from worker.delivery.ledger_io import LedgerIO
from worker.delivery.outbox import Outbox
from worker.delivery.sinks import MemorySink
from worker.ledger import Ledger
from worker.observability.observer import NullObserver


def finished_escalation(ledger: Ledger, job_id: str) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)
    ledger.open_job(
        job_id=job_id, kind="decide", batch=None, reply_to="s", fingerprint="f",
        deadline=soon, job_json="{}",
    )  # fmt: skip
    ledger.finish_job(
        job_id=job_id,
        message_type="escalation",
        message_json=json.dumps({"job_id": job_id, "type": "escalation"}),
        reason="decision_refused",
    )
    ledger.mark_published(job_id=job_id)


@pytest.mark.parametrize("resolved", [True, False])
def test_a_replayed_escalation_stays_out_of_the_queue_once_resolved(
    ledger: Ledger, resolved: bool
) -> None:
    finished_escalation(ledger, "again")
    if resolved:  # a label-less resolution, as the reaper stores it
        ledger.store_labels([], [("again", "ann", datetime.now(UTC), "1-0")])
    row = ledger.get_job("again")
    assert row is not None and row.published_at is not None
    sink = MemorySink()  # a Redis that forgot everything: no marker, no resolved record
    outbox = Outbox(sink, LedgerIO(ledger), NullObserver(), None)
    assert asyncio.run(outbox.publish(row, "s")) == "escalation"
    [message] = sink.messages
    assert message.job_id == "again" and message.escalation is not resolved
