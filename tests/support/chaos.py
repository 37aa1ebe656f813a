"""A chaos loop for a fleet: every few seconds it ``kill -9``s a worker (the whole process
group, or one pool process as the OOM killer would), or asks one to stop as an operator or
an orchestrator does (SIGTERM, SIGQUIT, Ctrl+C twice), and starts a replacement, keeping the
fleet at its size. A worker asked to stop that is still there after ``STOP_WAIT_S`` is
counted as hung (and killed). Seeded, so a run that found something can be replayed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fleet import Fleet, Worker

__all__ = ["STOP_WAIT_S", "Chaos", "ChaosFigures", "pool_processes"]

#: How long a worker asked to stop may take (a warm stop waits for the requests in flight).
STOP_WAIT_S = 30.0
#: The ways an operator or an orchestrator asks a worker to stop: (name, signals in turn).
_STOPS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("SIGTERM", (signal.SIGTERM,)),
    ("SIGQUIT", (signal.SIGQUIT,)),
    ("Ctrl+C twice", (signal.SIGINT, signal.SIGINT)),
)


def pool_processes(worker: Worker) -> list[int]:
    """The worker's direct children (its prefork pool), from /proc."""
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
    try:
        return [int(pid) for pid in children.read_text().split()]
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return []


@dataclass
class ChaosFigures:
    group_kills: int = 0
    pool_kills: int = 0
    stops: int = 0
    #: Workers asked to stop that were still there after ``STOP_WAIT_S`` (must stay 0).
    hung: int = 0
    starts: int = 0
    log: list[str] = field(default_factory=list)


class Chaos(threading.Thread):
    def __init__(
        self,
        crew: Fleet,
        *,
        size: int = 3,
        every_s: tuple[float, float] = (2.0, 5.0),
        pool_share: float = 0.25,
        stop_share: float = 0.0,
        seed: int | None = None,
        **worker_settings: str,
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.crew = crew
        self.size = size
        self.every_s = every_s
        self.pool_share = pool_share
        self.stop_share = stop_share
        self.seed = seed if seed is not None else random.randrange(2**32)
        self.rng = random.Random(self.seed)
        self.worker_settings = worker_settings
        self.figures = ChaosFigures()
        self._stop_event = threading.Event()

    def alive(self) -> list[Worker]:
        return [w for w in list(self.crew.workers) if w.alive()]

    def top_up(self) -> None:
        while len(self.alive()) < self.size:
            self.crew.start_worker(wait=False, **self.worker_settings)
            self.figures.starts += 1

    def strike(self) -> None:
        # Strike workers that took work: killing one still starting up proves little.
        alive = [w for w in self.alive() if "ready." in w.text()]
        if not alive:
            return
        victim = self.rng.choice(alive)
        pool = pool_processes(victim)
        if pool and self.rng.random() < self.pool_share:
            pid = self.rng.choice(pool)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.figures.pool_kills += 1
            self.figures.log.append(f"kill -9 pool process {pid} of {victim.name}")
            return
        if self.rng.random() < self.stop_share:
            self.stop_worker(victim)
        else:
            victim.kill()
            self.figures.group_kills += 1
            self.figures.log.append(f"kill -9 worker {victim.name}")
        self.top_up()

    def stop_worker(self, victim: Worker) -> None:
        """Ask ``victim`` to stop one of the ways an operator does, and wait for it."""
        how, signals = self.rng.choice(_STOPS)
        for i, sig in enumerate(signals):
            if i:
                self._stop_event.wait(0.5)  # the second Ctrl+C comes during the warm stop
            victim.signal(sig)
        self.figures.stops += 1
        try:
            code = victim.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.figures.hung += 1
            self.figures.log.append(f"{how} to {victim.name}: still there after {STOP_WAIT_S:g} s")
            victim.kill()
            return
        self.figures.log.append(f"{how} to {victim.name}: exit {code}")

    def run(self) -> None:
        while not self._stop_event.wait(self.rng.uniform(*self.every_s)):
            self.strike()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)
        self.top_up()
