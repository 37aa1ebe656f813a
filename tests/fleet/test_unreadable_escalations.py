"""``decisions_escalations_open`` counts an entry no reviewer can take (not JSON, not an
escalation) as ``unreadable``, not ``waiting``: counted as waiting, it stayed so for good
(the claim skips it, the console and ``decisions escalations list`` report it unreadable) and
kept ``DecisionsEscalationsWaiting`` up. The readers record such entries; the gauge reads
that record, never the bodies, so 20,000 open entries stay a few commands.

A real Redis (127.0.0.1:6379, database 10), on streams of this file's own, deleted after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared import keys
from shared.errors import EscalationNotFound
from shared.escalation_listing import find_open, list_open
from shared.escalation_unreadable import note_unreadable
from shared.escalations import EscalationQueue
from shared.replies import EscalationMessage, ResultMessage
from tests.support.services import REDIS_HOST, REDIS_PORT, unavailable
from worker.kinds.menus import check_menu_answer
from worker.observability.metrics.fleet import EscalationCounts, escalation_counts

REDIS_DB = 10
GROUP = keys.ESCALATION_GROUP


@pytest.fixture
def stream() -> Iterator[tuple[redis.Redis, str]]:
    """A client on database 10 and a stream name of this test's own; its keys deleted after."""
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        client.ping()
    except redis.ConnectionError:
        unavailable(f"Redis at {REDIS_HOST}:{REDIS_PORT}")
    name = f"test-unreadable-escalations:{uuid.uuid4().hex}"
    try:
        yield client, name
    finally:
        client.delete(name, keys.escalation_unreadable(name))
        client.close()


def entry(message: EscalationMessage, reply_to: str = "replies") -> dict[str, str]:
    """The escalation stream's fields of ``message``, as the worker writes them."""
    return {"job_id": message.job_id, "type": "escalation", "reply_to": reply_to,
            "message": message.to_json()}


def escalation(job_id: str) -> dict[str, str]:
    return entry(EscalationMessage(job_id=job_id, reason="decision_refused"))


NOT_JSON = {"job_id": "x", "type": "escalation", "reply_to": "replies", "message": "{not json"}
A_RESULT = {"job_id": "y", "type": "result", "reply_to": "replies",
            "message": ResultMessage(job_id="y", answers={}).to_json()}


def queue(r: redis.Redis, name: str) -> EscalationQueue:
    return EscalationQueue(r, stream=name, on_skip=lambda _entry, _why: None)


def counts(r: redis.Redis, name: str) -> EscalationCounts:
    return escalation_counts(r, stream=name, group=GROUP)


def test_an_entry_no_reviewer_can_take_is_unreadable_not_waiting(
    stream: tuple[redis.Redis, str],
) -> None:
    r, name = stream
    bad = [r.xadd(name, NOT_JSON).decode(), r.xadd(name, A_RESULT).decode()]
    good = [r.xadd(name, escalation(f"j{n}")).decode() for n in range(3)]
    claimed = queue(r, name).claim("ann")  # meets the two unreadable ones first
    assert claimed is not None and claimed.entry_id == good[0]
    found = counts(r, name)
    assert (found.waiting, found.claimed) == (2, 1), "the unreadable entries counted waiting"
    assert found.unreadable == 2
    assert found.open == 3
    assert {m.decode() for m in r.zrange(keys.escalation_unreadable(name), 0, -1)} == set(bad)

    # The console's and the CLI's list record what they find too.
    late = r.xadd(name, NOT_JSON).decode()
    assert counts(r, name).waiting == 3  # no reader met it yet
    page = list_open(queue(r, name))
    assert page.unreadable_count == 3
    assert counts(r, name) == EscalationCounts(waiting=2, claimed=1, unreadable=3)

    # Acknowledged by hand (an operator dropping it): no longer open, no longer counted.
    r.xack(name, GROUP, late)
    assert counts(r, name) == EscalationCounts(waiting=2, claimed=1, unreadable=2)

    # Trimmed: gone, counted nowhere; the next reader acknowledges it and forgets the record.
    r.xtrim(name, minid=good[0], approximate=False)
    assert counts(r, name) == EscalationCounts(waiting=2, claimed=1, unreadable=0)
    queue(r, name).claim("bob")
    assert counts(r, name) == EscalationCounts(waiting=1, claimed=2, unreadable=0)
    recorded = {m.decode() for m in r.zrange(keys.escalation_unreadable(name), 0, -1)}
    assert recorded == {late}  # the trimmed ones forgotten; one acked by hand stays till full


class Counting(redis.Redis):
    """A client counting the commands it sends, those in pipelines included."""

    sent = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        run = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            self.sent += len(pipe.command_stack)
            return run(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


def test_counting_20000_open_entries_reads_no_body(stream: tuple[redis.Redis, str]) -> None:
    r, name = stream
    pipe = r.pipeline(transaction=False)
    for n in range(20_000):
        pipe.xadd(name, NOT_JSON if n in (5, 7) else escalation(f"j{n}"))
    pipe.execute()
    list_open(queue(r, name))  # reads the first page: meets both
    counting = Counting(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        assert counts(counting, name) == EscalationCounts(
            waiting=19_998, claimed=0, unreadable=2
        )
        assert counting.sent <= 8  # XINFO x2, XPENDING, ZRANGEBYSCORE, one XPENDING per id
    finally:
        counting.close()


def bad_questions(job_id: str) -> dict[str, str]:
    """An escalation that parses, whose questions no answer can be checked against."""
    return entry(
        EscalationMessage(
            job_id=job_id, reason="decision_refused", context={"questions": ["not", "an object"]}
        )
    )


def test_the_claim_passes_over_questions_no_answer_can_be_checked_against(
    stream: tuple[redis.Redis, str],
) -> None:
    # Before, the claim handed it to a reviewer, who could neither see a form for it nor
    # resolve it; the console listed the same entry as unreadable.
    r, name = stream
    bad = r.xadd(name, bad_questions("jb")).decode()
    good = r.xadd(name, escalation("jg")).decode()
    skipped: list[tuple[str, str]] = []
    claimed = EscalationQueue(r, stream=name, on_skip=lambda e, why: skipped.append((e, why)))
    taken = claimed.claim("ann")
    assert taken is not None and taken.entry_id == good
    assert skipped == [(bad, "its questions are not an object: it cannot be resolved")]
    assert counts(r, name) == EscalationCounts(waiting=0, claimed=1, unreadable=1)
    # Nor can it be resolved by anyone who took it by hand: refused, saying why.
    r.execute_command("XCLAIM", name, GROUP, "bob", 0, bad)
    with pytest.raises(EscalationNotFound, match="questions are not an object"):
        queue(r, name).resolve(bad, "bob", {"q": "yes"})


def test_a_reader_that_can_read_an_entry_forgets_an_older_readers_mark(
    stream: tuple[redis.Redis, str],
) -> None:
    # A reader of an older version, which could not parse a field a newer one adds, recorded
    # the entry: before, the mark stayed and the gauge counted it unreadable for good.
    r, name = stream
    first = r.xadd(name, escalation("j1")).decode()
    second = r.xadd(name, escalation("j2")).decode()
    record = keys.escalation_unreadable(name)
    queue(r, name).sync()
    note_unreadable(r, name, GROUP, [first, second])  # as the older reader did
    assert counts(r, name).unreadable == 2
    list_open(queue(r, name))
    assert r.zcard(record) == 0
    assert counts(r, name) == EscalationCounts(waiting=2, claimed=0, unreadable=0)
    note_unreadable(r, name, GROUP, [second])
    queue(r, name).claim("ann")  # the claim's page reads both
    assert counts(r, name) == EscalationCounts(waiting=1, claimed=1, unreadable=0)


def test_the_list_closes_a_second_entry_of_a_job_resolved_already(
    stream: tuple[redis.Redis, str],
) -> None:
    # The stream could hold two entries of one job before it took one a job; the claim
    # closed the second once the first was resolved, but the list still showed it, and a
    # reviewer opening it met "already resolved".
    r, name = stream
    job, reply_to = f"twice-{uuid.uuid4().hex}", f"replies-{uuid.uuid4().hex}"
    labels = f"{name}:labels"
    q = EscalationQueue(r, stream=name, label_stream=labels, on_skip=lambda _e, _why: None)

    def added(job_id: str) -> str:
        message = EscalationMessage(job_id=job_id, reason="decision_refused")
        return r.xadd(name, entry(message, reply_to)).decode()  # type: ignore[arg-type]

    first, second, other = added(job), added(job), added(f"once-{uuid.uuid4().hex}")
    try:
        q.resolve(q.claim_entry(first, "ann").entry_id, "ann", {})
        page = list_open(q)
        assert [item.entry_id for item in page.items] == [other]
        assert counts(r, name).open == 1  # the second entry acknowledged, not left open
        assert find_open(q, second) is None
    finally:
        r.delete(keys.resolved_record(job), keys.reply_stream(reply_to), labels)


def menu_escalation(job_id: str, options: object) -> dict[str, str]:
    return entry(
        EscalationMessage(
            job_id=job_id, kind="menu", reason="decision_refused", context={"options": options}
        )
    )


def test_a_menu_no_answer_can_be_checked_against_is_not_handed_out(
    stream: tuple[redis.Redis, str],
) -> None:
    # Found by a second attack: the rule passed every menu escalation, so one whose options
    # cannot be rebuilt was claimed, listed as readable and refused by every resolve.
    r, name = stream
    bad = r.xadd(name, menu_escalation("m1", "not a list")).decode()
    good = r.xadd(name, menu_escalation("m2", [{"name": "refund", "kind": "value",
                                                 "value": 1}])).decode()
    skipped: list[tuple[str, str]] = []
    q = EscalationQueue(r, stream=name, menu_checker=check_menu_answer,
                        on_skip=lambda e, why: skipped.append((e, why)))
    taken = q.claim("ann")
    assert taken is not None and taken.entry_id == good
    assert [e for e, _why in skipped] == [bad] and "menu options" in skipped[0][1]
    assert list_open(q).unreadable == [bad]
    # A reader without the menu engine takes no menu escalation (it could resolve none),
    # and does not mark it unreadable: another reader can answer it.
    r.xadd(name, menu_escalation("m3", [{"name": "refund", "kind": "value", "value": 1}]))
    assert queue(r, name).claim("bob") is None
    assert counts(r, name) == EscalationCounts(waiting=1, claimed=1, unreadable=1)


HANDLER = {"kind": "handler", "name": "refund", "handler": "shop:refund"}


@pytest.mark.parametrize(
    "context",
    [
        {"options": [HANDLER], "handler_params": "x"},
        {"options": [HANDLER], "handler_params": [1]},
        {"options": [{**HANDLER, "description": {"a": 1}}],
         "handler_params": {"refund": {"params": []}}},
    ],
    ids=["params-a-string", "params-a-list", "description-an-object"],
)
def test_a_menu_of_another_shape_is_skipped_and_the_queue_goes_on(
    stream: tuple[redis.Redis, str], context: dict[str, object]
) -> None:
    # Found by a third attack: the menu's rebuild raised AttributeError on these, out of the
    # claim and the list, for every reader: one entry stopped the queue.
    r, name = stream
    message = EscalationMessage(
        job_id="menu-bad", kind="menu", reason="decision_refused", context=context
    )
    bad = r.xadd(name, entry(message)).decode()
    good = r.xadd(name, escalation("good")).decode()
    q = EscalationQueue(r, stream=name, menu_checker=check_menu_answer,
                        on_skip=lambda _e, _why: None)
    taken = q.claim("ann")
    assert taken is not None and taken.entry_id == good
    assert list_open(q).unreadable == [bad]
