"""A chaos loop for a fleet: every few seconds it ``kill -9``s a worker (the whole process
group, or one pool process as the OOM killer would) and starts a replacement, keeping the
fleet at its size. Seeded, so a run that found something can be replayed."""

from __future__ import annotations

import os
import random
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fleet import Fleet, Worker

__all__ = ["Chaos", "ChaosFigures", "pool_processes"]


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
        seed: int | None = None,
        **worker_settings: str,
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.crew = crew
        self.size = size
        self.every_s = every_s
        self.pool_share = pool_share
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
        victim.kill()
        self.figures.group_kills += 1
        self.figures.log.append(f"kill -9 worker {victim.name}")
        self.top_up()

    def run(self) -> None:
        while not self._stop_event.wait(self.rng.uniform(*self.every_s)):
            self.strike()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)
        self.top_up()
