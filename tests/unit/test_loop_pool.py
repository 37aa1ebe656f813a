"""``worker.process.pool.LoopPool``: a message's jobs run on the loop, and Celery's callbacks come
after them (late ack); a failed chunk goes Celery's own way; a job never started leaves its
message unacknowledged."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from kombu.serialization import dumps

from shared import keys
from shared.errors import NotAdmitted
from worker.process.loop import ProcessLoop
from worker.process.pool import LoopPool, message_jobs


class _Runner:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.gate = None
        self.fail = fail
        self.ran: list[Any] = []

    async def run_chunk(self, jobs: list[Any]) -> list[str]:
        self.ran.append(jobs)
        if self.fail is not None:
            raise self.fail
        return ["result"] * len(jobs)

    def flush_published(self) -> None:
        """No group commit here."""


@pytest.fixture
def loop() -> Any:
    loop = ProcessLoop()
    yield loop
    loop.stop()


def _pool(loop: ProcessLoop, runner: _Runner, monkeypatch: pytest.MonkeyPatch) -> LoopPool:
    ctx = SimpleNamespace(
        loop=loop, runner=runner, intake=None, settings=SimpleNamespace(max_in_flight=8)
    )
    monkeypatch.setattr("worker.process.pool.context.current", lambda: ctx)
    pool = LoopPool(limit=16, app=SimpleNamespace(conf=SimpleNamespace(accept_content=["json"])))
    pool.on_start()
    return pool


def _args(jobs: Any) -> tuple[Any, ...]:
    content_type, encoding, body = dumps([[], {"jobs": jobs}, {}], serializer="json")
    return (keys.RUN_JOBS_TASK, "task-1", {"id": "task-1"}, body, content_type, encoding)


def _apply(pool: LoopPool, jobs: Any) -> tuple[list[Any], list[Any], threading.Event]:
    called: list[Any] = []
    traced: list[Any] = []
    done = threading.Event()

    def callback(result: Any) -> None:
        called.append(result)
        done.set()

    def target(*args: Any) -> Any:
        traced.append(args)
        return (0, "'traced'", 0.0)

    pool.on_apply(target, _args(jobs), {}, callback=callback, accept_callback=lambda *a: None)
    return called, traced, done


def test_message_jobs_reads_both_call_shapes() -> None:
    assert message_jobs([], {"jobs": [{"id": "a"}]}) == [{"id": "a"}]
    assert message_jobs([{"id": "a"}], {}) == [{"id": "a"}]
    assert message_jobs([], {"jobs": {"id": "a"}}) == [{"id": "a"}]
    assert message_jobs([], {"other": 1}) is None


def test_a_message_runs_on_the_loop_and_is_acknowledged_after_its_jobs(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Runner()
    pool = _pool(loop, runner, monkeypatch)
    called, traced, done = _apply(pool, [{"id": "a"}, {"id": "b"}])
    assert done.wait(10)
    assert runner.ran == [[{"id": "a"}, {"id": "b"}]]
    assert traced == []  # the fast path: Celery's tracer never ran
    failed, retval, _runtime = called[0]
    assert failed == 0 and "result" in retval
    pool.on_stop()


def test_a_failed_chunk_goes_through_celerys_tracer_which_retries_or_fails_it(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Runner(fail=RuntimeError("ledger down"))
    pool = _pool(loop, runner, monkeypatch)
    called, traced, done = _apply(pool, [{"id": "a"}])
    assert done.wait(10)
    assert len(traced) == 1 and called == [(0, "'traced'", 0.0)]
    pool.on_stop()


def test_a_job_never_admitted_leaves_its_message_unacknowledged(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Runner(fail=NotAdmitted("stopping"))
    pool = _pool(loop, runner, monkeypatch)
    called, traced, _done = _apply(pool, [{"id": "a"}])
    pool.on_stop()  # waits for the message to settle
    assert runner.ran and called == [] and traced == []


def test_another_task_goes_through_celerys_tracer(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Runner()
    pool = _pool(loop, runner, monkeypatch)
    done = threading.Event()
    traced: list[Any] = []
    args = ("other.task", "t", {}, b"[[], {}, {}]", "application/json", "utf-8")
    pool.on_apply(lambda *a: traced.append(a), args, {}, callback=lambda r: done.set())
    assert done.wait(10)
    assert traced and runner.ran == []
    pool.on_stop()
