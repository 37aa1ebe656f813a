"""The worker's side of ``DECISIONS_MAX_MESSAGE_BYTES``: a popped item over the cap reaches
kombu as a small poison envelope (nothing of it decoded), which the guard counts as
``oversize_message``; an item within the cap is left as it came. The whole path through a
real worker and Redis: tests/faults/test_oversize_message.py."""

from __future__ import annotations

import json

import fakeredis
import pytest

from worker.process.broker import cap_pops
from worker.process.envelopes import (
    POISON_HEADER,
    POISON_REASON_HEADER,
    checked_envelope,
    envelope_loads,
    poison_envelope,
    poison_reason,
)

CAP = 1000
SECRET = b"do-not-log-me"


@pytest.fixture
def r() -> fakeredis.FakeRedis:
    return cap_pops(fakeredis.FakeRedis(), CAP)


def _poison_of(item: bytes) -> dict[str, object]:
    envelope = checked_envelope(envelope_loads(item.decode()))
    assert isinstance(envelope, dict) and envelope["body"] == ""
    headers = envelope["headers"]
    assert isinstance(headers, dict)
    return headers


def test_an_item_over_the_cap_is_popped_as_a_poison_envelope(r: fakeredis.FakeRedis) -> None:
    big = SECRET * 200  # 2,600 bytes
    r.lpush("decisions", big)
    queue, item = r.brpop(["decisions"], timeout=1)
    assert queue == b"decisions" and SECRET not in item and len(item) < CAP
    headers = _poison_of(item)
    assert headers[POISON_HEADER] == (
        f"a message of {len(big)} bytes; at most {CAP} (DECISIONS_MAX_MESSAGE_BYTES)"
    )
    assert poison_reason(headers) == "oversize_message"
    assert r.llen("decisions") == 0  # popped: gone from the queue


def test_basic_gets_pop_is_capped_too(r: fakeredis.FakeRedis) -> None:
    r.lpush("decisions", SECRET * 200)
    item = r.rpop("decisions")
    assert SECRET not in item and poison_reason(_poison_of(item)) == "oversize_message"


def test_an_item_within_the_cap_is_left_as_it_came(r: fakeredis.FakeRedis) -> None:
    fine = json.dumps({"body": "x" * (CAP - 20)}).encode()[:CAP]
    r.lpush("decisions", fine, fine)
    assert r.brpop(["decisions"], timeout=1) == (b"decisions", fine)
    assert r.rpop("decisions") == fine
    assert r.brpop(["decisions"], timeout=1) is None and r.rpop("decisions") is None


def test_the_reason_of_a_poison_envelope() -> None:
    assert poison_reason(poison_envelope("x", "oversize_message")["headers"]) == "oversize_message"
    assert poison_reason(poison_envelope("x")["headers"]) == "unreadable_envelope"
    # Pushed by hand: our header naming any other reason, or not a name, is unreadable.
    for named in ("job_refused", "made_up", ["oversize_message"], None):
        headers = {POISON_HEADER: "x", POISON_REASON_HEADER: named}
        assert poison_reason(headers) == "unreadable_envelope", named
    assert poison_reason({POISON_HEADER: "x"}) == "unreadable_envelope"
