"""The reviewers' queue on a real Redis: claim, release, resolve, and a vanished reviewer."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from shared import keys
from shared.errors import AlreadyResolved, EscalationNotFound, ResolutionInvalid
from shared.escalations import QUEUE_CONSUMER, EscalationQueue
from shared.job_parsing import parse_job
from shared.replies import Answer, EscalationMessage
from shared.streams import publish_once, read_entries, read_stream
from shared.verdicts import escalation
from tests.support.open_escalations import open_escalations
from tests.support.processes import DECISIONS, decisions_env
from tests.support.services import redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 10
STREAM = "esc-test:escalations"


@pytest.fixture
def r() -> Iterator[redis.Redis]:
    with redis_database(REDIS_DB) as client:
        yield client


def job(job_id: str, batch: str = "b1") -> object:
    return parse_job(
        {
            "id": job_id,
            "reply_to": "esc-test:replies",
            "batch": batch,
            "state": "s",
            "questions": {
                "urgent": {"type": "noul", "instructions": "Urgent?"},
                "team": {
                    "type": "choice",
                    "instructions": "Team?",
                    "criteria": {"billing": None, "sales": None},
                },
                "mood": {
                    "type": "score",
                    "instructions": "Mood?",
                    "criteria": ["calm", "cross", "livid"],
                },
            },
        }
    )


def escalate(
    r: redis.Redis,
    job_id: str,
    reason: str = "decision_refused",
    batch: str = "b1",
    stream: str = "esc-test:replies",
    escalation_stream: str = STREAM,
) -> None:
    answers = {
        "urgent": Answer(type="noul", value=True, probability=0.9, confidence=0.8),
        "team": Answer(type="choice", refused=True),
        "mood": Answer(type="score", value=1.2, confidence=0.9),
    }
    message = escalation(job(job_id, batch), reason, "test", [], answers)  # type: ignore[arg-type]
    publish_once(
        r,
        stream=stream,
        job_id=job_id,
        message_type="escalation",
        message_json=message.to_json(),
        escalation=True,
        escalation_stream=escalation_stream,
    )


def queue(
    r: redis.Redis, idle_s: float = 900.0, skipped: list[tuple[str, str]] | None = None
) -> EscalationQueue:
    on_skip = None if skipped is None else lambda entry_id, why: skipped.append((entry_id, why))
    return EscalationQueue(r, stream=STREAM, claim_idle_s=idle_s, on_skip=on_skip)


def resolutions(r: redis.Redis, stream: str = "esc-test:replies") -> list[dict[str, object]]:
    return [json.loads(e.message) for e in read_stream(r, stream) if e.type == "resolution"]


def test_two_reviewers_never_hold_the_same_escalation(r: redis.Redis) -> None:
    escalate(r, "j1")
    ann, bob = queue(r), queue(r)
    first = ann.claim("ann")
    assert first is not None and first.message.job_id == "j1"
    assert bob.claim("bob") is None
    assert [(e.message.job_id, e.holder) for e in open_escalations(bob)] == [("j1", "ann")]


def test_claims_come_oldest_first_and_filter_by_reason_and_batch(r: redis.Redis) -> None:
    escalate(r, "j1", "decision_refused", "b1")
    escalate(r, "j2", "low_confidence", "b2")
    escalate(r, "j3", "decision_refused", "b2")
    q = queue(r)
    assert q.claim("ann", reason="low_confidence").message.job_id == "j2"  # type: ignore[union-attr]
    assert q.claim("ann", batch="b2").message.job_id == "j3"  # type: ignore[union-attr]
    assert q.claim("ann").message.job_id == "j1"  # type: ignore[union-attr]
    assert q.claim("ann") is None


def test_release_returns_it_to_the_queue(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(EscalationNotFound):
        q.release(item.entry_id, "bob")
    q.release(item.entry_id, "ann")
    assert q.claim("bob").message.job_id == "j1"  # type: ignore[union-attr]


def test_a_vanished_reviewers_escalation_returns_after_the_idle_time(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r, idle_s=0.3)
    assert q.claim("ann") is not None
    assert q.claim("bob") is None
    time.sleep(0.4)
    again = q.claim("bob")
    assert again is not None and again.holder == "bob"


def test_resolve_checks_the_answer_publishes_the_resolution_and_closes(r: redis.Redis) -> None:
    escalate(r, "j1")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(ResolutionInvalid) as bad:
        q.resolve(item.entry_id, "ann", {"team": "marketing"})
    assert [p.field for p in bad.value.problems] == ["answer.team"]
    with pytest.raises(ResolutionInvalid) as missing:
        q.resolve(item.entry_id, "ann", {"urgent": False})
    assert [p.field for p in missing.value.problems] == ["answer.team"]
    with pytest.raises(EscalationNotFound):
        q.resolve(item.entry_id, "bob", {"team": "sales"})
    resolution = q.resolve(item.entry_id, "ann", {"team": "sales", "mood": "livid"})
    # The machine's usable answers stand where the reviewer gave none; a label maps to its index.
    assert resolution.answer == {"team": "sales", "mood": 2, "urgent": True}
    replies = [e for e in read_stream(r, "esc-test:replies") if e.type == "resolution"]
    assert len(replies) == 1 and json.loads(replies[0].message)["reviewer"] == "ann"
    assert open_escalations(q) == []


def test_an_interrupted_decision_needs_every_question_answered(r: redis.Redis) -> None:
    escalate(r, "j9", "decision_interrupted")
    q = queue(r)
    item = q.claim("ann")
    assert item is not None
    with pytest.raises(ResolutionInvalid) as bad:
        q.resolve(item.entry_id, "ann", {"team": "sales", "urgent": "yes"})
    assert sorted(p.field for p in bad.value.problems) == ["answer.mood", "answer.urgent"]


# --- #15 defect 9: a resolve is one step; a second one is refused naming the first ----------


def test_a_resolve_whose_reviewer_vanished_cannot_be_resolved_again(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    escalate(r, "j1")
    ann, bob = queue(r, idle_s=0.2), queue(r, idle_s=0.2)
    item = ann.claim("ann")
    assert item is not None

    def lost(*_: object, **__: object) -> None:
        raise redis.ConnectionError("ann's connection dropped")

    # Ann's resolve reaches Redis, then her connection drops: before, the resolution was
    # published and its acknowledgement (a second command) never sent.
    monkeypatch.setattr(r, "xack", lost)
    with contextlib.suppress(redis.ConnectionError):
        ann.resolve(item.entry_id, "ann", {"team": "sales"})
    monkeypatch.undo()
    time.sleep(0.3)  # ann is past the idle time: her escalations may be claimed
    taken = bob.claim("bob")
    with pytest.raises(AlreadyResolved) as refused:
        bob.resolve(taken.entry_id if taken else item.entry_id, "bob", {"team": "billing"})
    assert taken is None, "a resolved escalation was handed to another reviewer"
    assert refused.value.reviewer == "ann"
    at = datetime.fromisoformat(refused.value.resolved_at)
    assert abs((datetime.now(UTC) - at).total_seconds()) < 30
    assert "ann" in str(refused.value) and refused.value.resolved_at in str(refused.value)
    [published] = resolutions(r)
    assert published["answer"]["team"] == "sales" and published["reviewer"] == "ann"  # type: ignore[index]


def test_a_reviewer_who_lost_the_claim_cannot_resolve(r: redis.Redis) -> None:
    escalate(r, "j1")
    ann, bob = queue(r, idle_s=0.2), queue(r, idle_s=0.2)
    item = ann.claim("ann")
    assert item is not None
    time.sleep(0.3)
    assert bob.claim("bob") is not None
    with pytest.raises(EscalationNotFound, match="held by bob"):
        ann.resolve(item.entry_id, "ann", {"team": "sales"})
    with pytest.raises(EscalationNotFound, match="held by bob"):  # before the answer's check
        ann.resolve(item.entry_id, "ann", {"team": "marketing"})
    with pytest.raises(EscalationNotFound, match="no escalation"):
        ann.resolve("not-an-id", "ann", {"team": "sales"})
    bob.resolve(item.entry_id, "bob", {"team": "billing"})
    with pytest.raises(AlreadyResolved, match="by bob"):
        ann.resolve(item.entry_id, "ann", {"team": "sales"})
    assert [p["reviewer"] for p in resolutions(r)] == ["bob"]
    assert ann.resolution_of("j1")["reviewer"] == "bob"  # type: ignore[index]


# --- #15 defect 3: a job is escalated once and resolved at most once --------------------------


def test_a_job_resubmitted_to_another_stream_is_one_escalation(r: redis.Redis) -> None:
    escalate(r, "j1", stream="esc-test:replies")
    escalate(r, "j1", stream="esc-test:other")
    assert [e.job_id for e in read_entries(r, STREAM)] == ["j1"]
    assert [e.job_id for e in read_stream(r, "esc-test:other")] == ["j1"]
    q = queue(r)
    item = q.claim("ann")
    assert item is not None and q.claim("bob") is None


def test_two_entries_of_one_job_are_resolved_once(r: redis.Redis) -> None:
    # Two entries of one job, as the escalation stream held them before it was once a job.
    escalate(r, "j1", stream="esc-test:replies")
    [entry] = list(read_entries(r, STREAM))
    r.xadd(STREAM, {**entry.fields, "reply_to": "esc-test:other"})
    ann, bob = queue(r), queue(r)
    first, second = ann.claim("ann"), bob.claim("bob")
    assert first is not None and second is not None
    ann.resolve(first.entry_id, "ann", {"team": "sales"})
    with pytest.raises(AlreadyResolved, match="already resolved by ann"):
        bob.resolve(second.entry_id, "bob", {"team": "billing"})
    assert resolutions(r, "esc-test:other") == []
    assert len(resolutions(r)) == 1
    assert open_escalations(bob) == [], "the refused duplicate is closed too"


def test_a_second_entry_of_a_resolved_job_is_never_handed_out(r: redis.Redis) -> None:
    escalate(r, "j1", stream="esc-test:replies")
    [entry] = list(read_entries(r, STREAM))
    r.xadd(STREAM, {**entry.fields, "reply_to": "esc-test:other"})
    q = queue(r)
    first = q.claim("ann")
    assert first is not None
    q.resolve(first.entry_id, "ann", {"team": "sales"})
    assert open_escalations(q) == [] and q.claim("bob") is None
    assert r.xpending(STREAM, keys.ESCALATION_GROUP)["pending"] == 0


# --- #16 deliverable 8: one bad entry does not break the queue --------------------------------


def test_an_entry_that_does_not_parse_is_skipped_and_reported(r: redis.Redis) -> None:
    escalate(r, "j1")
    [good] = list(read_entries(r, STREAM))
    newer = json.loads(good.message) | {"a_field_from_a_newer_version": 1}
    bad_ids = [
        _text(r.xadd(STREAM, {**good.fields, "job_id": "j2", "message": json.dumps(newer)})),
        _text(r.xadd(STREAM, {"job_id": "j3", "type": "escalation", "message": "{not json"})),
        _text(r.xadd(STREAM, {"job_id": "j4", "type": "escalation"})),
        _text(r.xadd(STREAM, {**good.fields, "job_id": "j5", "reply_to": "decisions:x y"})),
    ]
    escalate(r, "j6")
    skipped: list[tuple[str, str]] = []
    q = queue(r, skipped=skipped)
    assert [e.message.job_id for e in open_escalations(q)] == ["j1", "j6"]
    assert [entry_id for entry_id, _ in skipped] == bad_ids
    assert "a_field_from_a_newer_version" in skipped[0][1]
    assert q.claim("ann").message.job_id == "j1"  # type: ignore[union-attr]
    assert q.claim("ann").message.job_id == "j6"  # type: ignore[union-attr]
    assert q.claim("ann") is None
    with pytest.raises(EscalationNotFound):
        q.resolve(bad_ids[0], "ann", {"team": "sales"})


def test_json_nested_too_deep_is_one_skipped_entry(r: redis.Redis) -> None:
    escalate(r, "j1")
    deep = "[" * 100_000 + "]" * 100_000  # deeper than Python's parser goes
    bad = _text(r.xadd(STREAM, {"job_id": "j2", "type": "escalation", "message": deep}))
    escalate(r, "j3")
    skipped: list[tuple[str, str]] = []
    q = queue(r, skipped=skipped)
    assert [e.message.job_id for e in open_escalations(q)] == ["j1", "j3"]
    assert skipped == [(bad, "its message is not JSON")]
    assert q.claim("ann").message.job_id == "j1"  # type: ignore[union-attr]


def test_entries_trimmed_or_deleted_while_open_are_closed_and_reported(r: redis.Redis) -> None:
    for job_id in ("j1", "j2", "j3", "j4"):
        escalate(r, job_id)
    skipped: list[tuple[str, str]] = []
    q = queue(r, skipped=skipped)
    ids = [e.entry_id for e in open_escalations(q)]  # all four pending in the group now
    r.xtrim(STREAM, maxlen=2, approximate=False)  # an operator capping the stream's memory
    r.xdel(STREAM, ids[2])
    assert [e.message.job_id for e in open_escalations(q)] == ["j4"]
    gone = "its body is gone (trimmed or deleted from the stream)"
    assert skipped == [(entry_id, gone) for entry_id in ids[:3]]
    assert r.xpending(STREAM, keys.ESCALATION_GROUP)["pending"] == 1  # acknowledged: not open
    assert [e.message.job_id for e in open_escalations(q)] == ["j4"]
    assert len(skipped) == 3  # reported once


def test_a_naive_created_at_is_read_as_utc(r: redis.Redis) -> None:
    escalate(r, "j1")
    [good] = list(read_entries(r, STREAM))
    naive = json.loads(good.message) | {"job_id": "j2", "created_at": "2024-01-01T00:00:00"}
    r.xadd(STREAM, {**good.fields, "job_id": "j2", "message": json.dumps(naive)})
    ages = {e.message.job_id: e.age_s for e in open_escalations(queue(r))}
    assert ages["j2"] == pytest.approx((datetime.now(UTC) - datetime(2024, 1, 1, tzinfo=UTC))
                                       .total_seconds(), abs=60)


def test_the_queue_s_own_consumer_name_cannot_resolve(r: redis.Redis) -> None:
    escalate(r, "j1")
    [entry] = open_escalations(queue(r))
    with pytest.raises(ValueError, match="reserved"):
        queue(r).resolve(entry.entry_id, QUEUE_CONSUMER, {"team": "sales"})
    assert resolutions(r) == [] and [e.holder for e in open_escalations(queue(r))] == [None]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- the CLI: a bad entry is named on stderr; an answer of any size from a file or stdin ----


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = decisions_env(redis_url=redis_url(REDIS_DB))
    return subprocess.run(
        [DECISIONS, "escalations", *args],
        env={**env, "COLUMNS": "200"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_lists_around_an_entry_it_cannot_parse_and_names_it(r: redis.Redis) -> None:
    escalate(r, "j1", escalation_stream=keys.ESCALATION_STREAM)
    bad = _text(r.xadd(keys.ESCALATION_STREAM, {"job_id": "j2", "message": "{not json"}))
    escalate(r, "j3", escalation_stream=keys.ESCALATION_STREAM)
    listed = cli("list")
    assert listed.returncode == 0, listed.stderr
    # 3 entries are open, 2 of them escalations a reviewer can answer (the list's header
    # counts every open entry since it pages: "2 of 3").
    assert "j1" in listed.stdout and "j3" in listed.stdout and "2 of 3 open" in listed.stdout
    assert f"skipped escalation {bad}: its message is not JSON" in listed.stderr
    claimed = cli("claim", "--reviewer", "ann", "--json")
    assert claimed.returncode == 0, claimed.stderr
    assert json.loads(claimed.stdout)["escalation"]["job_id"] == "j1"


def big_escalation(r: redis.Redis, job_id: str, items: int) -> None:
    questions = {f"item.{i}": {"type": "noul", "instructions": f"Keep {i}?"} for i in range(items)}
    message = EscalationMessage(
        job_id=job_id,
        kind="sift",
        reason="decision_interrupted",
        context={"questions": questions, "state": "a long list"},
        reply_to="esc-test:replies",
    )
    publish_once(
        r,
        stream="esc-test:replies",
        job_id=job_id,
        message_type="escalation",
        message_json=message.to_json(),
        escalation=True,
    )


@pytest.mark.parametrize("how", ["--answer-file", "--answer -"])
def test_a_ten_thousand_item_answer_resolves_from_a_file_or_stdin(
    r: redis.Redis, tmp_path: Path, how: str
) -> None:
    big_escalation(r, "sift-1", 10_000)
    item = EscalationQueue(r).claim("ann")
    assert item is not None
    answer = {f"item.{i}": i % 3 == 0 for i in range(10_000)}
    text = json.dumps(answer)
    if how == "--answer-file":
        path = tmp_path / "answer.json"
        path.write_text(text)
        done = cli("resolve", item.entry_id, "--reviewer", "ann", "--answer-file", str(path))
    else:
        done = cli("resolve", item.entry_id, "--reviewer", "ann", "--answer", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    assert "resolved sift-1" in done.stdout and len(done.stdout) < 1000
    [published] = resolutions(r)
    assert published["answer"] == answer


def test_the_cli_wants_exactly_one_answer(r: redis.Redis, tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("{}")
    both = cli("resolve", "0-1", "--answer", "{}", "--answer-file", str(path))
    assert both.returncode == 2 and "--answer-file" in both.stderr
    broken = cli("resolve", "0-1", "--answer", "-", stdin="{nope")
    assert broken.returncode == 2 and "stdin" in broken.stderr and "not JSON" in broken.stderr
    twice = cli("resolve", "0-1", "--answer", '{"a": true, "a": false}')
    assert twice.returncode == 2 and "appears twice" in twice.stderr
    nan = cli("resolve", "0-1", "--answer", '{"a": NaN}')
    assert nan.returncode == 2 and "NaN" in nan.stderr


def test_every_move_through_the_cli_is_in_the_audit_log(r: redis.Redis) -> None:
    """The queue itself writes the audit log (``shared.audit``): a reviewer's claim, release
    and resolution made with ``decisions escalations`` are recorded as the console's are."""
    escalate(r, "aud-1", batch="b-aud", escalation_stream=keys.ESCALATION_STREAM)
    claimed = cli("claim", "--reviewer", "ann", "--json")
    assert claimed.returncode == 0, claimed.stderr
    entry = json.loads(claimed.stdout)["id"]
    assert cli("release", entry, "--reviewer", "ann").returncode == 0
    assert cli("claim", "--reviewer", "bob", "--json").returncode == 0
    answer = json.dumps({"urgent": True, "team": "billing", "mood": 1})
    resolved = cli("resolve", entry, "--reviewer", "bob", "--answer", answer)
    assert resolved.returncode == 0, resolved.stderr
    logged = [
        {_text(k): _text(v) for k, v in fields.items()}
        for _, fields in r.xrange(keys.batch_audit_log("b-aud"))
    ]
    assert [(e["action"], e["reviewer"]) for e in logged] == [
        ("claim", "ann"),
        ("release", "ann"),
        ("claim", "bob"),
        ("resolve", "bob"),
    ]
    assert all(e["job_id"] == "aud-1" and e["entry_id"] == entry for e in logged)
    assert json.loads(logged[-1]["answer"]) == {"urgent": True, "team": "billing", "mood": 1}


class CountingRedis(redis.Redis):
    """Counts the escalation bodies a queue reads (one XRANGE an entry)."""

    bodies_read = 0

    def pipeline(self, transaction: bool = True, shard_hint: object = None) -> object:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        outer = self
        xrange = pipe.xrange

        def counted(*args: object, **kwargs: object) -> object:
            outer.bodies_read += 1
            return xrange(*args, **kwargs)  # type: ignore[arg-type]

        pipe.xrange = counted  # type: ignore[method-assign]
        return pipe


def test_a_claim_reads_a_page_not_the_whole_queue_and_finds_one_past_it(r: redis.Redis) -> None:
    """Each claim read every open entry, so resolving a queue of N took N^2 reads (1,439
    resolutions took 9 minutes). A claim now reads a page at a time, oldest first, and still
    reaches an entry beyond the first page when every one before it is held."""
    pipe = r.pipeline(transaction=False)
    for n in range(1000):
        message = escalation(job(f"p{n:03d}"), "decision_refused", "test", [], {})  # type: ignore[arg-type]
        pipe.xadd(STREAM, {"message": message.to_json(), "reply_to": "esc-test:replies"})
    pipe.execute()
    ann = queue(r)
    assert ann.claim("ann").message.job_id == "p000"  # type: ignore[union-attr]
    ids = [entry_id.decode() for entry_id, _ in r.xrange(STREAM, count=430)]
    held = [ann.claim_entry(entry_id, "ann") for entry_id in ids]  # the oldest 430
    counting = CountingRedis(connection_pool=r.connection_pool)
    bob = EscalationQueue(counting, stream=STREAM)
    taken = bob.claim("bob")
    assert taken is not None and taken.message.job_id == "p430"  # on the third page
    assert counting.bodies_read <= 3 * 200
    counting.bodies_read = 0
    assert bob.get(held[7].entry_id).holder == "ann"
    assert counting.bodies_read == 1
    with pytest.raises(EscalationNotFound):
        bob.get("not-an-id")
