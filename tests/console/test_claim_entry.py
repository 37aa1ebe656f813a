"""Opening an escalation in the console claims that one entry, atomically (real Redis)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from shared.errors import EscalationNotFound
from shared.escalations import EscalationQueue
from tests.console.support import REDIS_DB, publish, refused_escalation
from tests.support.open_escalations import open_escalations
from tests.support.services import redis_database

pytestmark = pytest.mark.integration


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def test_claim_entry_takes_that_entry_and_no_other(r: redis.Redis) -> None:
    publish(r, refused_escalation("j1"))
    publish(r, refused_escalation("j2"))
    q = EscalationQueue(r)
    second = open_escalations(q)[1]
    taken = q.claim_entry(second.entry_id, "ann")
    assert (taken.message.job_id, taken.holder) == ("j2", "ann")
    held = {(e.message.job_id, e.holder) for e in open_escalations(q)}
    assert held == {("j1", None), ("j2", "ann")}
    # Opening it again is harmless for its holder and refused to anyone else.
    assert q.claim_entry(second.entry_id, "ann").holder == "ann"
    with pytest.raises(EscalationNotFound, match="held by ann"):
        q.claim_entry(second.entry_id, "bob")


def test_claim_entry_of_a_closed_or_lapsed_claim(r: redis.Redis) -> None:
    publish(r, refused_escalation("j1"))
    q = EscalationQueue(r, claim_idle_s=0.2)
    entry = open_escalations(q)[0].entry_id
    q.claim_entry(entry, "ann")
    with pytest.raises(EscalationNotFound):
        q.claim_entry(entry, "bob")
    time.sleep(0.3)
    assert q.claim_entry(entry, "bob").holder == "bob"
    q.resolve(entry, "bob", {"team": "sales"})
    with pytest.raises(EscalationNotFound):
        q.claim_entry(entry, "ann")
