"""``worker.process.pool.LoopPool``: a message's jobs run on the loop, and Celery's callbacks come
after them (late ack); a failed chunk goes Celery's own way; a job never started leaves its
message unacknowledged."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from celery.worker import state as worker_state
from kombu.serialization import dumps

from shared import keys
from shared.errors import NotAdmitted
from worker.process.loop import ProcessLoop
from worker.process.pool import CELERY_STRATEGY_LOGGER, LoopPool, message_jobs


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
        loop=loop,
        runner=runner,
        intake=None,
        settings=SimpleNamespace(max_in_flight=8, default_provider="faux"),
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


class _Stuck(_Runner):
    """A request that never ends (a provider that does not answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = 0

    async def run_chunk(self, jobs: list[Any]) -> list[str]:
        self.ran.append(jobs)
        await asyncio.Event().wait()
        return []

    def flush_published(self) -> None:
        self.flushed += 1


def _in_thread(fn: Any) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_a_cold_shutdown_stops_the_pool_at_once_without_waiting_for_requests(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Celery's on_cold_shutdown, in its signal handler: cancel the requests, mark the
    # cold shutdown, then stop the pool. A stop that waited for the requests in flight
    # held the signal handler (and whatever lock the main thread held when the signal
    # came) until something else killed the process: a CI run waited 30 s for nothing.
    runner = _Stuck()
    pool = _pool(loop, runner, monkeypatch)
    called, traced, _done = _apply(pool, [{"id": "a"}])
    deadline = time.monotonic() + 10
    while not runner.ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.ran
    monkeypatch.setattr(worker_state, "should_terminate", True)
    stopper = _in_thread(pool.on_stop)
    stopper.join(5)
    assert not stopper.is_alive(), "a cold shutdown waited for the requests in flight"
    assert not loop.alive()  # the requests were cut off where they were
    assert called == [] and traced == []  # never acknowledged: the broker delivers it again
    assert runner.flushed == 0


def test_a_cold_shutdown_during_a_warm_one_ends_its_wait(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Stuck()
    pool = _pool(loop, runner, monkeypatch)
    called, _traced, _done = _apply(pool, [{"id": "a"}])
    warm = _in_thread(pool.on_stop)
    warm.join(0.3)
    assert warm.is_alive()  # a warm shutdown waits for the request in flight
    monkeypatch.setattr(worker_state, "should_terminate", True)
    pool.on_terminate()  # the second signal: Celery terminates the pool
    warm.join(5)
    assert not warm.is_alive(), "the warm shutdown's wait outlived the cold one"
    assert called == [] and runner.flushed == 0


def test_pool_grow_and_shrink_say_what_bounds_the_loop_pool(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _pool(loop, _Runner(), monkeypatch)
    for change in (pool.grow, pool.shrink):
        with pytest.raises(NotImplementedError, match=r"DECISIONS_MAX_IN_FLIGHT \(now 8\)"):
            change(2)
    pool.on_stop()


@pytest.mark.parametrize(("level", "received_logged"), [("INFO", False), ("DEBUG", True)])
def test_celerys_received_line_is_left_to_debug(
    loop: ProcessLoop, monkeypatch: pytest.MonkeyPatch, level: str, received_logged: bool
) -> None:
    """Celery's strategy logs each message received when INFO is enabled for its logger; on
    this pool a job's own events say more, so the line is kept for DEBUG only."""
    root, strategy = logging.getLogger(), logging.getLogger(CELERY_STRATEGY_LOGGER)
    monkeypatch.setattr(root, "level", logging.getLevelName(level))
    monkeypatch.setattr(strategy, "level", logging.NOTSET)
    assert strategy.isEnabledFor(logging.INFO)  # what Celery would see without the pool
    _pool(loop, _Runner(), monkeypatch)
    logging.Logger.manager._clear_cache()
    assert strategy.isEnabledFor(logging.INFO) is received_logged
    logging.Logger.manager._clear_cache()
