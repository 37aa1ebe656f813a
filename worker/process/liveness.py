"""Liveness that tells the truth: the threads a worker process cannot work without.

A worker process runs its jobs on one asyncio loop thread (``worker.process.loop``) and, in the main
process, a reaper thread (``worker.recovery.reaper``) and, on the loop pool, the thread that
acknowledges its messages (``worker.process.acks``). If one ends other than by a deliberate
stop,
the process still takes messages from the broker and runs nothing: with the threads pool a
task waits for the dead loop forever (and a warm shutdown waits for that task), with prefork
one pool process is stuck for good. So a vital thread that ends unexpectedly is fatal:

- ``/healthz`` and ``/readyz`` answer 503 from that moment (``failures``);
- the process exits with ``EXIT_CODE`` shortly after (``fatal``), so that its supervisor
  (Kubernetes, systemd, Celery's prefork pool for a pool process) starts a new one; the
  messages it held are unacknowledged and the broker delivers them again (a prefork parent
  requeues a lost child's at once, ``task_reject_on_worker_lost``).

A warm shutdown never hangs either: ``exit_after`` bounds it (``worker.app`` arms it when one
begins, at the task hard time limit, past which a prefork pool kills its processes anyway).

Exiting is ``os._exit``: the interpreter's own exit would join threads and atexit hooks,
which is exactly what may hang here. A lease fence (``worker.delivery.leased``) uses ``fatal``
too:
a handler thread cannot be stopped, the process can.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import structlog

__all__ = ["EXIT_CODE", "EXIT_DELAY_S", "exit_after", "failures", "fatal", "reset", "vital"]

log = structlog.get_logger("decisions.worker")

#: The exit status of a worker that stopped because a vital part of it died (EX_SOFTWARE).
EXIT_CODE = 70
#: How long the process lives on after a fatal failure: its probes answer 503 meanwhile and
#: its last log line gets out. Nothing runs in that time (the part that runs jobs is dead).
EXIT_DELAY_S = 1.0

_lock = threading.Lock()
#: What died in this process (pid → name → why); a forked child starts with nothing.
_failed: dict[int, dict[str, str]] = {}


def failures() -> dict[str, str]:
    """The vital parts of this process that died, and why (empty: alive)."""
    with _lock:
        return dict(_failed.get(os.getpid(), {}))


def reset() -> None:
    """Forget recorded failures (tests that call ``fatal`` with the exit stubbed)."""
    with _lock:
        _failed.pop(os.getpid(), None)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing more to say
            stream.flush()


def _exit_now() -> None:
    # The flush on a thread of its own, waited for briefly: a stream blocked for ever (a
    # full pipe nobody reads) must not keep a dead process alive.
    flusher = threading.Thread(target=_flush, daemon=True)
    flusher.start()
    flusher.join(EXIT_DELAY_S)
    os._exit(EXIT_CODE)


def fatal(name: str, why: str) -> NoReturn:
    """Record that ``name`` died, make the probes fail, and end the process.

    Never returns to the caller: the calling thread waits for the exit. (Tests replace the
    exit by patching ``worker.process.liveness._exit_now``.)"""
    with _lock:
        _failed.setdefault(os.getpid(), {})[name] = why
    # The exit is armed before the log line: a log handler's lock can be held for ever by
    # a main thread stuck in a signal handler, and the process must end all the same.
    timer = threading.Timer(EXIT_DELAY_S, _exit_now)
    timer.daemon = True
    timer.start()
    log.critical("worker.vital_part_died", part=name, error=why, exit_code=EXIT_CODE)
    timer.join()
    raise SystemExit(EXIT_CODE)  # only reached when the exit is stubbed


@contextmanager
def vital(name: str, *, stopping: Callable[[], bool]) -> Iterator[None]:
    """Run the body of a vital thread: leaving it while ``stopping()`` is false is fatal.

    ``stopping`` says whether the thread was asked to stop (a deliberate end is not a death)."""
    try:
        yield
    except BaseException as exc:  # whatever ended the thread, say what
        if not stopping():
            fatal(name, f"{type(exc).__name__}: {exc}"[:300])
        raise
    if not stopping():
        fatal(name, "returned without being asked to stop")


def exit_after(seconds: float, why: str) -> threading.Timer:
    """End the process in ``seconds`` unless it ended by itself first (a daemon timer)."""

    def overdue() -> None:
        log.error("worker.forced_exit", error=why, after_s=seconds, exit_code=EXIT_CODE)
        _exit_now()

    timer = threading.Timer(seconds, overdue)
    timer.daemon = True
    timer.start()
    return timer
