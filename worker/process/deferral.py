"""Messages handed back to the broker so that a slow provider's backlog cannot hold the rest.

Slots are per provider (``worker.process.inflight``), but the loop pool reserves jobs in
queue order, ``2 x DECISIONS_MAX_IN_FLIGHT`` of them: a backlog of one slow provider's jobs
queued ahead filled the reserve with jobs waiting for that provider, and jobs for every other
provider behind them waited too (measured: twelve jobs for a provider answering in 3 s, four
slots, held fifty jobs of a fast provider for the 6 s of two rounds; a backlog of thousands
held them for as long as it took to drain).

So a message whose jobs all wait for one provider that already holds its slots and a
quarter more waiting (``waiting_share``) is handed back to the broker instead of kept: Celery's
``Reject(requeue=True)``, which kombu's Redis transport does in one transaction (the message
leaves the unacknowledged set and goes to the back of the queue: it is in one of them at
every moment, so nothing is lost, and nothing of its jobs was started, so nothing is done
twice). The worker takes the next message, which may be another provider's.

Only while this process has taken another provider's jobs lately (``RECENT_S``): with one
provider there is nobody to make room for, and handing its messages back would only reorder
them (the moved ones waiting a whole queue longer, nearer their deadlines) and cost CPU: a
batch of one provider in chunks of 32 would have handed chunks back all along.

Handing back costs a delivery and a transaction in Redis, and a queue holding only the slow
provider's jobs would be cycled through as fast as the broker goes: ``rate_per_s`` bounds the
hand-backs of a process (a token bucket); past it, a message is kept and waits its turn as
before. Measured with four slots and a queue of 300 jobs of a provider answering in 3 s: 17
hand-backs a second (each waits for its way round the consumer), and the worker's CPU 3.1%
of a core against 1.2% with none. Messages with jobs for several providers are never handed
back (their jobs cannot be split), nor are any during a shutdown.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Final

__all__ = ["HANDBACK_RATE_PER_S", "MAX_SEEN", "RECENT_S", "Deferrals"]

#: Messages a process hands back a second, at most (and as many at once).
HANDBACK_RATE_PER_S: Final = 50.0
#: How long after taking a provider's jobs the process still counts it as served (s).
RECENT_S: Final = 300.0
#: Providers remembered at most (past it, the half seen longest ago are forgotten).
MAX_SEEN: Final = 1024


class Deferrals:
    """Jobs reserved per provider in one process, and whether to hand a message back."""

    def __init__(
        self, limit: int, *, rate_per_s: float = HANDBACK_RATE_PER_S, waiting_share: int = 4
    ) -> None:
        #: Jobs of one provider reserved past which its messages are handed back.
        self.ceiling = limit + max(1, limit // waiting_share)
        self.rate_per_s = rate_per_s
        self._reserved: Counter[str] = Counter()
        #: When each provider's jobs were last taken (monotonic).
        self._seen: dict[str, float] = {}
        self._tokens = rate_per_s
        self._refilled: float | None = None  # a full bucket until the first hand-back
        self._lock = threading.Lock()
        #: Messages handed back so far (tests, ``celery inspect stats``).
        self.handed_back = 0

    def admit(
        self, providers: Iterable[str], *, may_hand_back: bool = True, now: float | None = None
    ) -> bool:
        """Count a message's jobs (their providers) as reserved, or say to hand it back
        (False: nothing counted)."""
        counts = Counter(providers)
        now = time.monotonic() if now is None else now
        with self._lock:
            if may_hand_back and len(counts) == 1:
                ((provider, jobs),) = counts.items()
                if (
                    self._reserved[provider] + jobs > self.ceiling
                    and self._others_served(provider, now)
                    and self._take_token(now)
                ):
                    self.handed_back += 1
                    return False
            self._reserved.update(counts)
            for provider in counts:
                self._seen[provider] = now
            if len(self._seen) > MAX_SEEN:
                # Names come from jobs: made-up ones must not each be kept for good (found by
                # an attack). The latest seen are what ``_others_served`` reads.
                latest = sorted(self._seen.items(), key=lambda seen: seen[1])[-MAX_SEEN // 2 :]
                self._seen = {p: at for p, at in latest if now - at < RECENT_S}
        return True

    @property
    def providers_remembered(self) -> int:
        """How many providers' last service is kept (tests)."""
        return len(self._seen)

    def _others_served(self, provider: str, now: float) -> bool:
        return any(p != provider and now - at < RECENT_S for p, at in self._seen.items())

    def done(self, providers: Iterable[str]) -> None:
        """A message admitted has finished (acknowledged or handed on)."""
        with self._lock:
            self._reserved.subtract(providers)
            for provider in [p for p, n in self._reserved.items() if n <= 0]:
                del self._reserved[provider]

    def _take_token(self, now: float) -> bool:
        since = 0.0 if self._refilled is None else max(0.0, now - self._refilled)
        self._tokens = min(self.rate_per_s, self._tokens + since * self.rate_per_s)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
