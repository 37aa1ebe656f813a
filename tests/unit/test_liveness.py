"""No job can stop the worker's loop; a vital thread that dies anyway fails the probes and ends
the process (``worker.process.liveness``, ``worker.process.loop``,
``worker.observability.metrics.server``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared.errors import ExitContained
from worker.observability.metrics.server import MetricsServer, Readiness
from worker.process import liveness
from worker.process.loop import LOOP_THREAD, ProcessLoop
from worker.recovery.reaper import ReaperThread


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """``os._exit`` replaced: each fatal end is recorded (and its thread ends instead)."""
    seen: list[float] = []
    monkeypatch.setattr(liveness, "_exit_now", lambda: seen.append(time.monotonic()))
    monkeypatch.setattr(liveness, "EXIT_DELAY_S", 0.05)
    liveness.reset()
    yield seen
    liveness.reset()


def in_thread(fn: Any, timeout_s: float = 10) -> Any:
    """``fn()`` on a thread; fails (instead of hanging the suite) if it does not return."""
    box: list[Any] = []

    def body() -> None:
        try:
            box.append(("value", fn()))
        except BaseException as exc:  # handed to the test
            box.append(("error", exc))

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert box, f"still waiting after {timeout_s} s"
    return box[0]


async def raises_exit() -> None:
    raise SystemExit(4)


async def child_raises_interrupt() -> list[Any]:
    async def child() -> None:
        raise KeyboardInterrupt

    return await asyncio.gather(child(), return_exceptions=True)


def test_a_task_raising_system_exit_is_its_error_and_the_loop_goes_on(
    exits: list[float],
) -> None:
    loop = ProcessLoop()
    try:
        kind, error = in_thread(lambda: loop.run(raises_exit()))
        assert kind == "error" and isinstance(error, ExitContained)
        assert "SystemExit" in str(error)
        [(kind, results)] = [in_thread(lambda: loop.run(child_raises_interrupt()))]
        assert kind == "value" and isinstance(results[0], ExitContained)
        assert in_thread(lambda: loop.run(asyncio.sleep(0, "still here"))) == (
            "value",
            "still here",
        )
        assert loop.alive() and not exits and liveness.failures() == {}
    finally:
        loop.stop()


def test_a_loop_that_dies_anyway_is_fatal_and_fails_the_probes(exits: list[float]) -> None:
    loop = ProcessLoop()

    def stop_it() -> None:
        raise SystemExit("a bug outside any task")

    loop.loop.call_soon_threadsafe(stop_it)
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.02)
    assert exits, "the process would have gone on without its loop"
    assert LOOP_THREAD in liveness.failures()
    server = MetricsServer(directory=None, readiness=Readiness())
    server.readiness.ready.set()
    assert probe(server, "/healthz")[0].startswith("503")
    assert probe(server, "/readyz")[0].startswith("503")
    # A task that was waiting for it is not left waiting forever.
    kind, _ = in_thread(lambda: loop.run(asyncio.sleep(60)), timeout_s=10)
    assert kind == "error"


def test_the_probes_answer_200_while_everything_lives(exits: list[float]) -> None:
    server = MetricsServer(directory=None, readiness=Readiness())
    server.readiness.ready.set()
    assert probe(server, "/healthz") == ("200 OK", b"ok\n")
    assert probe(server, "/readyz") == ("200 OK", b"ready\n")


def test_a_reaper_thread_that_dies_is_fatal(
    exits: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.process import context

    def broken() -> Any:
        raise SystemExit("the reaper's round raised what it does not catch")

    monkeypatch.setattr(context, "current", broken)
    reaper = ReaperThread(0.01)
    reaper.start()
    reaper.join(5)
    assert exits and "decisions-reaper" in liveness.failures()


def test_a_reaper_asked_to_stop_is_not_a_death(exits: list[float]) -> None:
    reaper = ReaperThread(30)
    reaper.start()
    reaper.stop()
    reaper.join(5)
    assert not reaper.is_alive() and not exits and liveness.failures() == {}


def probe(server: MetricsServer, path: str) -> tuple[str, bytes]:
    got: list[str] = []
    body = server.app({"PATH_INFO": path}, lambda status, headers: got.append(status))
    return got[0], b"".join(body)


def test_exit_after_ends_the_process_unless_it_ended_first(exits: list[float]) -> None:
    began = time.monotonic()
    timer = liveness.exit_after(0.1, "a warm shutdown outlasted the hard limit")
    timer.join(5)
    assert exits and exits[0] - began >= 0.1
    cancelled = liveness.exit_after(0.1, "never")
    cancelled.cancel()
    time.sleep(0.2)
    assert len(exits) == 1


def test_a_fatal_end_comes_even_when_its_log_line_cannot_be_written(
    exits: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A log handler's lock held by a main thread that never lets go (it was interrupted by
    # a signal handler that waits): the last log line waits for ever, the exit must not.
    held = threading.Event()

    class _Blocked:
        def critical(self, *args: Any, **kwargs: Any) -> None:
            held.wait(30)

    monkeypatch.setattr(liveness, "log", _Blocked())
    dying = threading.Thread(target=lambda: liveness.fatal("decisions-loop", "gone"), daemon=True)
    dying.start()
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.01)
    ended = bool(exits)
    held.set()
    dying.join(5)
    assert ended, "the process waited for its last log line instead of exiting"
    assert liveness.failures() == {"decisions-loop": "gone"}
