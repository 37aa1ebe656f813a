"""The faux's own rate limit: a provider that answers 429 past N requests a second.

A sliding one-second window of admitted decision requests; one over the limit is answered
429 with ``Retry-After`` (when the oldest admitted request leaves the window), before its
body is counted: a real provider did not process it either. The 429s are counted, so a test
can read how hard a fleet pushed (``GET /_faux/rate-limit``). Set at run time with
``PUT /_faux/rate-limit`` ``{"per_second": N}`` (``null``: no limit), which restarts the count.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["RateLimit"]

WINDOW_S = 1.0


class RateLimit:
    def __init__(
        self, per_second: int | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if per_second is not None and per_second < 1:
            raise ValueError("per_second must be at least 1 (or None: no limit)")
        self._lock = threading.Lock()
        self._clock = clock
        self._per_second = per_second
        self._admitted: deque[float] = deque()
        self._rejected = 0
        self._passed = 0

    @property
    def per_second(self) -> int | None:
        return self._per_second

    def configure(self, per_second: int | None) -> None:
        """A new limit; the window and the counts start again."""
        if per_second is not None and per_second < 1:
            raise ValueError("per_second must be at least 1 (or None: no limit)")
        with self._lock:
            self._per_second = per_second
            self._admitted.clear()
            self._rejected = 0
            self._passed = 0

    def check(self) -> float | None:
        """Admit one request (None), or the seconds it should wait: it gets a 429."""
        with self._lock:
            if self._per_second is None:
                self._passed += 1
                return None
            now = self._clock()
            admitted = self._admitted
            while admitted and admitted[0] <= now - WINDOW_S:
                admitted.popleft()
            if len(admitted) >= self._per_second:
                self._rejected += 1
                return max(0.001, admitted[0] + WINDOW_S - now)
            admitted.append(now)
            self._passed += 1
            return None

    def snapshot(self) -> dict[str, int | None]:
        with self._lock:
            return {
                "per_second": self._per_second,
                "rejected": self._rejected,
                "admitted": self._passed,
            }
