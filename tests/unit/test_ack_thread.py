"""``worker.process.acks.AckThread`` and the intake forget it runs: nothing a message holds
ends the thread that acknowledges every later message."""

from __future__ import annotations

import threading
from typing import Any

import fakeredis
import pytest

from shared import keys
from shared.intake import IntakeBook, intake_member
from worker.process import liveness
from worker.process.acks import AckThread
from worker.recovery.intake import forget_ran


def test_forget_skips_jobs_no_producer_could_have_recorded() -> None:
    """A ``reply_to`` of 5 raised TypeError, a lone surrogate UnicodeEncodeError (found by an
    attack): the records of the jobs beside them are forgotten all the same."""
    r = fakeredis.FakeRedis()
    book = IntakeBook(r)
    member = intake_member("s", "ok")
    r.hset(keys.INTAKE_JOBS, member, "x")
    r.zadd(keys.INTAKE_TIMES, {member: 1})
    hostile: list[Any] = [
        {"id": "a", "reply_to": 5},
        {"id": "\ud800", "reply_to": "s"},
        {"id": "b", "reply_to": "\udfff"},
        {"id": 7},
        "not a job",
        {"id": "ok", "reply_to": "s"},
    ]
    forget_ran(book, hostile)
    assert r.hlen(keys.INTAKE_JOBS) == 0


def test_a_forget_that_raises_leaves_later_acknowledgements_going(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    died: list[str] = []
    monkeypatch.setattr(liveness, "fatal", lambda name, why: died.append(f"{name}: {why}"))

    def forget(jobs: list[Any]) -> None:
        raise TypeError("first argument must be a string, not int")

    acks = AckThread(forget)
    done = threading.Event()
    acks.put(lambda: None, ran=[{"id": "a", "reply_to": 5}])
    acks.put(done.set, ran=[{"id": "b"}])
    assert done.wait(10), "a later acknowledgement never ran"
    acks.close(5)
    assert died == []


# The thread's end re-raises what ended it, as a thread's body does: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_thread_ending_unasked_is_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should it end all the same, the process exits for its supervisor (its messages are
    unacknowledged, so the broker delivers them again), rather than take messages it will
    never acknowledge."""
    died = threading.Event()
    monkeypatch.setattr(liveness, "fatal", lambda name, why: died.set())
    acks = AckThread(lambda jobs: None)
    acks.put(lambda: (_ for _ in ()).throw(SystemExit(0)))  # past ``except Exception``
    assert died.wait(10)
    closed = AckThread(lambda jobs: None)
    calls: list[str] = []
    monkeypatch.setattr(liveness, "fatal", lambda name, why: calls.append(name))
    closed.close(5)
    assert calls == []
