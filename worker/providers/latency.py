"""What a provider's answers have taken lately, and the time left under which a request is
not sent.

A request sent with less time before its job's deadline than the provider usually takes is
mostly cut off in flight: its outcome is unknown (the provider may have answered, and
charged), and the job escalates ``decision_interrupted`` for a person to reconcile. Measured
on a default worker offered 600 single-job messages a second (twice what it sustains) with a
5 s job timeout and answers 1 s away: 457 of 1,936 requests sent were cut off that way, each
a paid request with nothing to show for it. So a request is not sent when the time left is
under a quantile of the provider's recent answer times (``DECISIONS_SEND_FLOOR_QUANTILE``,
the median by default: it would more likely than not be cut off). It fails as the deadline
passing before a send does (``timeout``, nothing in flight): the job escalates
``deadline_exceeded`` with nothing sent, which needs no reconciling and costs nothing.

Only answered attempts (a 2xx, body read) are counted, from the send to the end of the body:
not the wait for a send slot, and not a failure, whose time says nothing of an answer's.
Until ``MIN_SAMPLES`` answers are known there is no floor: a new process sends as before.
Per provider object, so per process; the window is short (``WINDOW``) so that the floor
follows a provider that slows down or recovers within a minute of traffic.

Answers older than ``HORIZON_S`` no longer count. Without that, a slow spell could stop a
provider's traffic for good: answers 12 s away make a floor of 12 s, every job of 10 s
timeouts is then refused, so no answer comes to show the provider recovered. With it,
refusing lasts at most ``HORIZON_S`` past the last answer; then requests go out as before,
and their answers set the floor again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Final

__all__ = ["HORIZON_S", "MIN_SAMPLES", "WINDOW", "RecentLatency"]

#: Answers remembered per provider.
WINDOW: Final = 32
#: Answers known before any floor applies.
MIN_SAMPLES: Final = 8
#: How long an answer counts (s).
HORIZON_S: Final = 60.0


class RecentLatency:
    """The last ``WINDOW`` answer times of one provider, and the floor they give."""

    def __init__(self, quantile: float = 0.5) -> None:
        if not 0.0 <= quantile < 1.0:
            raise ValueError(f"quantile must be at least 0 and below 1, not {quantile}")
        self.quantile = quantile
        #: (when it was noted, monotonic; how long the answer took)
        self._answers: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        # A thread pool's threads share the provider (``--pool threads``).
        self._lock = threading.Lock()

    def note(self, seconds: float, *, now: float | None = None) -> None:
        """An answered attempt took ``seconds``."""
        with self._lock:
            self._answers.append((time.monotonic() if now is None else now, seconds))

    def floor_s(self, *, now: float | None = None) -> float:
        """The time left under which a request is not sent (0: too few recent answers, or
        turned off)."""
        if self.quantile <= 0.0:
            return 0.0
        since = (time.monotonic() if now is None else now) - HORIZON_S
        with self._lock:
            while self._answers and self._answers[0][0] < since:
                self._answers.popleft()
            if len(self._answers) < MIN_SAMPLES:
                return 0.0
            ranked = sorted(seconds for _, seconds in self._answers)
        return ranked[int(self.quantile * len(ranked))]
