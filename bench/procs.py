"""The processes a bench run starts (faux server, workers) and the meter of a process tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from shared import keys

__all__ = [
    "InFlight",
    "Meter",
    "TreeUsage",
    "faux_process",
    "free_port",
    "spawn_worker",
    "wait_for",
]

BIN = Path(sys.executable).parent
DECISIONS = str(BIN / "decisions")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: object, what: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    assert callable(check)
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} after {timeout_s} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a pool child left behind


@contextmanager
def faux_process(log: Path) -> Iterator[str]:
    """``decisions faux serve`` on a free loopback port (its own process: its CPU is not ours)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [DECISIONS, "faux", "serve", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: httpx.get(f"{url}/_faux/health", timeout=1).status_code == 200,
            "the faux server",
            proc,
            20,
        )
        yield url
    finally:
        _stop(proc)


@contextmanager
def spawn_worker(
    argv: Sequence[str], env: Mapping[str, str], log: Path, *, ready: str = "ready."
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker (``decisions worker`` or ``celery worker``) in its own session, until ready."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: ready in log.read_text(errors="replace"), f"{argv[0]} ready", proc, 90)
        yield proc
    finally:
        _stop(proc)


@dataclass(frozen=True)
class TreeUsage:
    cpu_s: float
    peak_rss_bytes: int


class Meter:
    """CPU seconds and peak RSS of processes and their children, sampled on a thread."""

    def __init__(self, *pids: int, interval_s: float = 0.05) -> None:
        self._roots = [psutil.Process(pid) for pid in pids]
        self._interval = interval_s
        self._stop = threading.Event()
        self._peak = 0
        self._thread: threading.Thread | None = None
        self._cpu0 = 0.0
        self._dead_cpu = 0.0

    def _tree(self) -> list[psutil.Process]:
        tree: list[psutil.Process] = []
        for root in self._roots:
            with contextlib.suppress(psutil.NoSuchProcess):
                tree += [root, *root.children(recursive=True)]
        return tree

    def _cpu(self) -> float:
        total = 0.0
        for proc in self._tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def _rss(self) -> int:
        total = 0
        for proc in self._tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
        return total

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak = max(self._peak, self._rss())

    def __enter__(self) -> Meter:
        self._cpu0 = self._cpu()
        self._peak = self._rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.usage = TreeUsage(self._cpu() - self._cpu0, max(self._peak, self._rss()))


class InFlight:
    """Decisions at the provider: requests the faux has read minus replies on the stream.

    Sampled on a thread; ``peak`` is the most seen at once (a reply follows its answer, so
    this counts a decision from its request until its terminal message).
    """

    def __init__(self, faux_url: str, r: Any, stream: str, interval_s: float = 0.2) -> None:
        self._url = f"{faux_url}/_faux/calls"
        self._r = r
        self._stream = keys.reply_stream(stream)
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._base = 0
        self.peak = 0

    def _read(self) -> int:
        return len(httpx.get(self._url, timeout=10).json())

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):
                in_flight = self._read() - self._base - int(self._r.xlen(self._stream))
                self.peak = max(self.peak, in_flight)

    def __enter__(self) -> InFlight:
        self._base = self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
