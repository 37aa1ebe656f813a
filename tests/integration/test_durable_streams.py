"""Durable streams (#15 defect 10): a worker refuses a streams Redis without persistence
unless told to accept the risk, and ``decisions ledger republish`` writes a stream that lost
its entries again from the ledger, each message at most once.

Each test runs a redis-server of its own: one without persistence is restarted empty, as
a cache-like Redis is after a crash.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import sqlalchemy as sa
from pydantic import ValidationError
from structlog.testing import capture_logs

from shared import keys
from shared.client import Client
from shared.errors import ConfigurationError
from shared.escalations import EscalationQueue
from shared.settings import Settings
from shared.streams import read_entries, read_stream
from tests.support.ownservers import OwnRedis, own_redis
from tests.support.processes import DECISIONS, decisions_env, worker_process
from tests.support.services import free_port, postgres_schema
from worker.ledger import Ledger
from worker.ledger.models import jobs, labels
from worker.process import durability
from worker.process.durability import check_streams_durable, persistence_of
from worker.recovery.republish import republish_stream, stored_messages

pytestmark = pytest.mark.integration

STREAM = "durable:replies"


@pytest.fixture
def volatile() -> Iterator[OwnRedis]:
    with own_redis(persist=False) as server:
        yield server


def settings_for(server: OwnRedis, ledger_url: str = "sqlite://", **more: Any) -> Settings:
    url = server.url()
    return Settings(broker_url=url, redis_url=url, ledger_url=ledger_url, **more)


def test_a_redis_without_persistence_is_refused_naming_it_and_the_fix(volatile: OwnRedis) -> None:
    problem = check_streams_durable(settings_for(volatile))
    assert problem is not None
    assert f"127.0.0.1:{volatile.port}/0" in problem
    assert "appendonly no" in problem and "DECISIONS_ACCEPT_VOLATILE_STREAMS=1" in problem
    assert check_streams_durable(settings_for(volatile, accept_volatile_streams=True)) is None


def test_aof_is_persistence() -> None:
    with own_redis() as server, capture_logs() as logs:
        assert check_streams_durable(settings_for(server)) is None
    assert not [e for e in logs if e["event"] == "streams.snapshots_only"]


def test_snapshots_alone_start_and_say_what_a_restore_loses(volatile: OwnRedis) -> None:
    # Found by an attack: a resolution lives in Redis alone until a reaper round stores it in
    # the ledger; a Redis back from an older snapshot forgot it, and a republish put its
    # escalation back for a second reviewer. Snapshots are accepted, but said to lose that.
    client = redis.Redis.from_url(volatile.url())
    client.config_set("save", "3600 1")
    with capture_logs() as logs:
        assert check_streams_durable(settings_for(volatile)) is None
    [said] = [e for e in logs if e["event"] == "streams.snapshots_only"]
    assert "appendonly yes" in said["risk"] and f":{volatile.port}/0" in said["server"]


@pytest.mark.parametrize("persist", [False, True])
def test_a_managed_redis_without_config_is_judged_by_info(persist: bool) -> None:
    with own_redis(persist=persist, extra=("--rename-command", "CONFIG", "")) as server:
        found = persistence_of(redis.Redis.from_url(server.url()))
        assert found.durable is persist
        assert "CONFIG refused" in found.evidence


def test_a_redis_that_says_nothing_is_refused_naming_the_fix() -> None:
    acl = ("--user", "default", "on", "nopass", "~*", "&*", "+@all", "-config", "-info")
    with own_redis(persist=True, extra=acl) as server:
        problem = check_streams_durable(settings_for(server))
    assert problem is not None and "cannot tell" in problem and "Allow INFO" in problem


def test_a_redis_that_does_not_answer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durability, "REACH_TIMEOUT_S", 0.5)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with pytest.raises(ConfigurationError, match=f"127.0.0.1:{port}/0 .* did not answer"):
        check_streams_durable(Settings(redis_url=url, broker_url=url))


@pytest.mark.parametrize("accept", [False, True])
def test_a_streams_database_out_of_range_is_named_whatever_the_risk_accepted(
    volatile: OwnRedis, accept: bool
) -> None:
    url = volatile.url(99)
    with pytest.raises(ConfigurationError, match="DECISIONS_REDIS_URL") as caught:
        check_streams_durable(
            Settings(redis_url=url, broker_url=url, accept_volatile_streams=accept)
        )
    assert "no database 99" in str(caught.value) and "out of range" in str(caught.value)
    assert "Allow INFO" not in str(caught.value)


def test_accepting_volatile_streams_still_reaches_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durability, "REACH_TIMEOUT_S", 0.5)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    settings = Settings(redis_url=url, broker_url=url, accept_volatile_streams=True)
    with pytest.raises(ConfigurationError, match=f"127.0.0.1:{port}/0 .*did not answer") as caught:
        check_streams_durable(settings)
    assert "DECISIONS_REDIS_URL" in str(caught.value) and "refused" in str(caught.value)


def test_a_streams_login_refused_is_named_whatever_the_risk_accepted() -> None:
    user = ("--user", "bob", "on", ">right", "~*", "&*", "+@all")
    with own_redis(persist=False, extra=user) as server:
        url = f"redis://bob:wrong@127.0.0.1:{server.port}/0"
        settings = Settings(redis_url=url, broker_url=url, accept_volatile_streams=True)
        with pytest.raises(ConfigurationError, match="refused the credentials") as caught:
            check_streams_durable(settings)
    assert "wrong" not in str(caught.value)


def test_a_streams_url_redis_cannot_read_is_named_without_its_password() -> None:
    """Refused with the settings now (``shared.setting_types.redis_database_problem``),
    before any connection: named by its field, the password never in the error."""
    url = "redis://:hunter2@127.0.0.1:6379/0?db=x"
    with pytest.raises(ValidationError) as caught:
        Settings(redis_url=url, broker_url=url, accept_volatile_streams=True)
    fields = {".".join(str(part) for part in e["loc"]) for e in caught.value.errors()}
    assert fields == {"redis_url", "broker_url"}
    assert "?db=x" in str(caught.value) and "hunter2" not in str(caught.value)


def test_a_worker_refuses_to_start_on_volatile_streams(volatile: OwnRedis, tmp_path: Path) -> None:
    env = decisions_env(
        broker_url=volatile.url(),
        redis_url=volatile.url(),
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        accept_volatile_streams="0",
    )
    done = subprocess.run(
        [DECISIONS, "worker", "--migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "refusing" in line]
    assert len(lines) == 1 and "does not persist" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def job(i: int, *, escalate: bool) -> dict[str, Any]:
    question: dict[str, Any] = {"type": "noul", "instructions": "Urgent?"}
    if escalate:
        question["escalate_below"] = 1.0  # no made-up answer is that sure: low_confidence
    return {
        "id": f"d-{i}",
        "kind": "decide",
        "state": f"ticket {i}: my invoice is wrong",
        "questions": {"urgent": question},
    }


def test_republish_rewrites_what_a_restart_without_persistence_lost(
    volatile: OwnRedis, tmp_path: Path
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = decisions_env(broker_url=volatile.url(), redis_url=volatile.url(), ledger_url=ledger_url)
    settings = settings_for(volatile, ledger_url)
    r = redis.Redis.from_url(volatile.url())
    jobs = [job(i, escalate=i < 2) for i in range(6)]
    with worker_process(env, "--migrate", log=tmp_path / "worker.log"):
        client = Client(settings, redis_client=r)
        report = client.submit_batch(jobs, reply_to=STREAM)
        replies = list(client.replies(STREAM, job_ids=report.job_ids, timeout_s=120))
    kinds = {reply.job_id: reply.type for reply in replies}
    assert kinds == {f"d-{i}": "escalation" if i < 2 else "result" for i in range(6)}
    volatile.kill()
    volatile.start()  # empty: every reply and escalation is gone
    assert list(read_stream(r, STREAM)) == []

    def republish(*args: str) -> str:
        done = subprocess.run(
            [DECISIONS, "ledger", "republish", "--stream", STREAM, *args],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return " ".join(done.stdout.split())

    assert "wrote 0 message(s)" in republish("--since", "2099-01-01T00:00")
    out = republish("--since", "1h")
    assert "6 finished job(s)" in out and "wrote 6 message(s)" in out
    assert "2 escalation(s)" in out
    assert "wrote 0 message(s)" in republish(), "a second run wrote again"
    entries = list(read_stream(r, STREAM))
    assert sorted(e.job_id for e in entries) == sorted(kinds)
    assert {e.job_id: e.type for e in entries} == kinds
    escalated = [e.job_id for e in read_entries(r, keys.ESCALATION_STREAM)]
    assert sorted(escalated) == ["d-0", "d-1"]
    # The reviewers' queue has them again, and a resolution reaches the stream.
    queue = EscalationQueue(r)
    item = queue.claim("ann")
    assert item is not None
    queue.resolve(item.entry_id, "ann", {"urgent": True})
    assert "0 escalation(s)" in republish()
    assert len(list(read_entries(r, keys.ESCALATION_STREAM))) == 2


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    if request.param == "sqlite":
        with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
            ledger.migrate()
            yield ledger
        return
    with postgres_schema("republish") as url, Ledger(url) as ledger:
        ledger.migrate()
        yield ledger


def test_republish_pages_through_the_ledger_in_order_and_since(ledger: Ledger) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(7):
        rows.append(  # two jobs finished at each moment: the page key is (time, id)
            {
                "job_id": f"p-{i}",
                "kind": "decide",
                "batch": None,
                "reply_to": "pages" if i != 3 else "elsewhere",
                "fingerprint": "f",
                "deadline": start,
                "job_json": "{}",
                "created_at": start,
                "terminal_type": "escalation" if i == 5 else "result",
                "terminal_reason": None,
                "terminal_message": json.dumps({"job_id": f"p-{i}"}),
                "finished_at": start + timedelta(seconds=i // 2),
                "published_at": start,
            }
        )
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), rows)
    pages = list(stored_messages(ledger, "pages", page=2))
    assert [len(p) for p in pages] == [2, 2, 2]
    assert [p.job_id for page in pages for p in page] == ["p-0", "p-1", "p-2", "p-4", "p-5", "p-6"]
    assert [p.escalation for page in pages for p in page] == [False] * 4 + [True, False]
    since = list(stored_messages(ledger, "pages", since=start + timedelta(seconds=2)))
    assert [p.job_id for page in since for p in page] == ["p-4", "p-5", "p-6"]
    r = fakeredis.FakeRedis()
    report = republish_stream(ledger, r, "pages")
    assert (report.jobs, report.replies, report.escalations) == (6, 6, 1)
    assert republish_stream(ledger, r, "pages").replies == 0


#: When the hand-made jobs below finished (and were first published).
START = datetime(2026, 1, 1, tzinfo=UTC)


def finished(
    job_id: str,
    reply_to: str,
    *,
    kind: str = "escalation",
    reason: str | None = "low_confidence",
    message: str | None = None,
    batch: str | None = None,
) -> dict[str, Any]:
    """A finished, published job's row as the ledger keeps it."""
    return {
        "job_id": job_id, "kind": "decide", "batch": batch, "reply_to": reply_to,
        "fingerprint": "f", "deadline": START, "job_json": "{}", "created_at": START,
        "terminal_type": kind, "terminal_reason": reason,
        "terminal_message": message or json.dumps({"job_id": job_id}),
        "finished_at": START, "published_at": START,
    }  # fmt: skip


def test_republish_does_not_reopen_an_escalation_a_reviewer_resolved(ledger: Ledger) -> None:
    """A Redis that forgot everything forgot its resolved records too: the ledger's labels
    say which escalations a reviewer resolved, and those stay closed (a second reviewer once
    resolved one again, with another answer)."""
    rows = [finished(job_id, "lost", batch="b") for job_id in ("e-open", "e-resolved")]
    label = {
        "job_id": "e-resolved", "question_id": "urgent", "batch": "b", "question_type": "noul",
        "human_answer": "true", "correct": False, "reviewer": "ann", "resolved_at": START,
        "source": "escalation", "reason": "low_confidence", "entry_id": "1-0",
        "stored_at": START,
    }  # fmt: skip
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), rows)
        conn.execute(sa.insert(labels), [label])
    r = fakeredis.FakeRedis()  # empty, as after a restart without persistence
    for _ in range(2):
        republish_stream(ledger, r, "lost")
    assert sorted(e.job_id for e in read_stream(r, "lost")) == ["e-open", "e-resolved"]
    assert [e.job_id for e in read_entries(r, keys.ESCALATION_STREAM)] == ["e-open"]


def test_republish_does_not_reopen_a_resolved_escalation_that_made_no_label(
    ledger: Ledger,
) -> None:
    """A refused decision escalates with no machine answer, so its resolution makes no label:
    the ledger must still learn that it was resolved. Found by an attack: after a Redis that
    forgot everything, ``republish`` put it back and a second reviewer resolved it again with
    another answer."""
    from shared.replies import EscalationMessage
    from worker.calibration.intake import store_label_stream

    message = EscalationMessage(
        job_id="e-refused", reason="decision_refused", detail="the provider refused",
        reply_to="lost", context={"questions": {"urgent": {"type": "noul"}}},
    )  # fmt: skip
    row = finished(
        "e-refused", "lost", reason="decision_refused", message=message.to_json(), batch="b"
    )
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), [row])
    r = fakeredis.FakeRedis()
    assert republish_stream(ledger, r, "lost").escalations == 1
    queue = EscalationQueue(r)
    item = queue.claim("ann")
    assert item is not None and item.message.job_id == "e-refused"
    queue.resolve(item.entry_id, "ann", {"urgent": True})
    store_label_stream(ledger, r)  # a reaper's pass: no label, but the resolution
    r.flushall()  # a Redis restarted without persistence
    for _ in range(2):
        assert republish_stream(ledger, r, "lost").escalations == 0
    assert list(read_entries(r, keys.ESCALATION_STREAM)) == []
    assert [e.job_id for e in read_stream(r, "lost")] == ["e-refused"]


def test_republish_writes_nothing_still_on_the_stream_once_its_markers_expired(
    ledger: Ledger,
) -> None:
    """The publish-once markers live ``DECISIONS_PUBLISH_MARKER_TTL_S`` (7 days); the stream's
    entries live until someone trims them. Found by an attack: once the markers expired,
    every ``republish`` wrote each message (and each escalation) again beside the one still
    there. It now reads what the stream holds, and puts the markers back."""
    rows = [
        finished(
            job_id, "kept", kind=kind, reason=None,
            message=json.dumps({"job_id": job_id, "type": kind}),
        )
        for job_id, kind in (("k-result", "result"), ("k-escalated", "escalation"))
    ]  # fmt: skip
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), rows)
    r = fakeredis.FakeRedis()
    first = republish_stream(ledger, r, "kept")
    assert (first.replies, first.escalations) == (2, 1)
    markers = [*r.scan_iter("decisions:published:*"), *r.scan_iter("decisions:escalated:*")]
    assert len(markers) == 3
    r.delete(*markers)  # their TTL ran out; the entries are still there
    again = republish_stream(ledger, r, "kept")
    assert (again.replies, again.escalations) == (0, 0)
    assert sorted(e.job_id for e in read_stream(r, "kept")) == ["k-escalated", "k-result"]
    assert [e.job_id for e in read_entries(r, keys.ESCALATION_STREAM)] == ["k-escalated"]
    assert len([*r.scan_iter("decisions:published:*")]) == 2  # put back
    # A stream that did lose an entry still gets it back.
    [lost] = [e for e in read_stream(r, "kept") if e.job_id == "k-result"]
    r.xdel(keys.reply_stream("kept"), lost.entry_id)
    assert republish_stream(ledger, r, "kept").replies == 1


def test_republish_writes_a_resumed_jobs_lost_message_beside_its_first(ledger: Ledger) -> None:
    """A job ``decisions budget resume`` reopened published its new message under a marker
    of its own; ``republish`` judged it by the first one, whose entry (the budget_exhausted
    escalation) was still there, so its lost result never came back."""
    row = finished(
        "r-resumed", "resumed", reason="budget_exhausted", batch="b",
        message=json.dumps({"job_id": "r-resumed", "first": True}),
    )  # fmt: skip
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), [row])
    r = fakeredis.FakeRedis()
    assert republish_stream(ledger, r, "resumed").replies == 1  # the first message
    resumed = json.dumps({"job_id": "r-resumed", "type": "result"})
    with ledger.engine.begin() as conn:  # resumed, answered, and its result lost
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.job_id == "r-resumed")
            .values(resumes=1, terminal_type="result", terminal_reason=None,
                    terminal_message=resumed)
        )  # fmt: skip
    assert republish_stream(ledger, r, "resumed").replies == 1
    assert [e.type for e in read_stream(r, "resumed")] == ["escalation", "result"]
    assert republish_stream(ledger, r, "resumed").replies == 0


def test_republish_puts_back_a_lost_escalation_stream_beside_an_intact_reply_stream(
    ledger: Ledger,
) -> None:
    """Found by an attack on the change above: with the reply stream intact, its messages
    were skipped whole, escalations included, so a deleted escalation stream never came
    back. What each stream holds is read, and each is judged on its own."""
    rows = [finished(job_id, "both") for job_id in ("b-1", "b-2")]
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(jobs), rows)
    r = fakeredis.FakeRedis()
    assert republish_stream(ledger, r, "both").escalations == 2
    r.delete(keys.ESCALATION_STREAM)  # deleted by hand; the reply stream is intact
    again = republish_stream(ledger, r, "both")
    assert (again.replies, again.escalations) == (0, 2)
    assert sorted(e.job_id for e in read_entries(r, keys.ESCALATION_STREAM)) == ["b-1", "b-2"]
    r.delete(*r.scan_iter("decisions:published:*"), *r.scan_iter("decisions:escalated:*"))
    third = republish_stream(ledger, r, "both")  # markers expired: both streams read
    assert (third.replies, third.escalations) == (0, 0)
    assert len(list(read_entries(r, keys.ESCALATION_STREAM))) == 2


def test_a_managed_redis_on_snapshots_just_restarted_is_judged_by_what_it_loaded() -> None:
    """An earlier note's item: INFO was read by ``rdb_saves`` alone, which a restart sets to
    0, so a snapshot-only Redis without CONFIG was refused until its next snapshot."""
    rdb_only = ("--save", "3600 1", "--rename-command", "CONFIG", "")
    with own_redis(persist=False, extra=rdb_only) as server:
        client = redis.Redis.from_url(server.url())
        client.set("kept", "1")
        client.save()
        server.stop()
        server.start()
        assert client.get("kept") == b"1"
        found = persistence_of(client)
        info = client.info("persistence")
    assert info["rdb_saves"] == 0 and info["aof_enabled"] == 0
    assert found.durable and not found.aof
    assert "rdb_last_load_keys_loaded 1" in found.evidence
