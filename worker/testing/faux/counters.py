"""What the faux has seen, counted under one lock (the server thread and tests both read).

Requests are counted by body digest (what a provider records as ``request_sha256``) and by
call key; ``fail_first`` budgets are counted here too, so that "the first N requests" is
exact however many connections race for it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Counters"]


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_digest: Counter[str] = Counter()
        self._by_call: Counter[str] = Counter()
        self._failures: Counter[str] = Counter()
        self._total = 0
        self._waiting = 0
        self._peak = 0

    def record(self, digest: str, call_key: str | None) -> None:
        with self._lock:
            self._by_digest[digest] += 1
            if call_key is not None:
                self._by_call[call_key] += 1
            self._total += 1

    def take_failure(self, scope: str, fail_first: int | None) -> bool:
        """Whether a failing mode applies to this request; uses one unit of ``fail_first``."""
        if fail_first is None:
            return True
        with self._lock:
            if self._failures[scope] >= fail_first:
                return False
            self._failures[scope] += 1
            return True

    def restart_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def reset(self) -> None:
        with self._lock:
            self._by_digest.clear()
            self._by_call.clear()
            self._failures.clear()
            self._total = 0
            self._peak = self._waiting

    def by_digest(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_digest)

    def by_call(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_call)

    def count(self, digest: str) -> int:
        with self._lock:
            return self._by_digest.get(digest, 0)

    def total(self) -> int:
        with self._lock:
            return self._total

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A request held for its latency: how many are held at once is what shows that the
        faux answers concurrently (a test asserts it instead of timing a burst)."""
        with self._lock:
            self._waiting += 1
            self._peak = max(self._peak, self._waiting)
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    def peak_waiting(self) -> int:
        with self._lock:
            return self._peak
