"""Calibrated thresholds for the worker: ``escalate_below: {"calibrated": T, "fallback": F}``.

The threshold is what ``decisions calibration --target T`` suggests for the question id and
type, provider and model, once the labels are enough (``calibration_min_labels``, counted as
Kish's effective size, never more than the labels themselves: ``shared.calibration``), and
never below the lowest confidence those labels measured (nothing speaks for answers below
it); the fallback otherwise. Suggestions are cached per (question, type, provider, model,
target) for ``calibration_ttl_s``: a decision never waits on a ledger query, except the first of its
group after the cache expired, which a kind runs beforehand (``prefetch``, on a thread) so
the event loop is not held. A ledger that cannot be read, or labels whose figures cannot be
computed, give the fallback (logged once a period: the failure is cached as a result is),
never a failed decision: the receipt says which floor was used and from how many labels
(``shared.replies.Threshold``). A label that cannot count is left out by the statistics
themselves (``shared.calibration.countable``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import structlog

from shared import scrub
from shared.calibration import DEFAULT_MIN_LABELS, report
from shared.errors import LedgerError
from shared.jobs import DecideJob
from shared.questions import CalibratedFloor
from shared.replies import Threshold
from worker.calibration.figures import scored
from worker.ledger import Ledger
from worker.ledger.label_ops import LabelFilter

__all__ = ["ThresholdBook"]

log = structlog.get_logger("decisions.calibration")

_Key = tuple[str, str | None, str, str | None, float]
#: A suggestion (None: too few labels) and the labels behind it.
_Found = tuple[float | None, int]


class ThresholdBook:
    """Suggested thresholds, read from the ledger's labels and cached for a short while."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        ttl_s: float = 60.0,
        min_labels: float = DEFAULT_MIN_LABELS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        self.min_labels = min_labels
        self.clock = clock
        self._cache: dict[_Key, tuple[float, _Found]] = {}
        self._lock = threading.Lock()
        #: Ledger queries made (a test counts them: one per group and period, not per job).
        self.queries = 0

    def threshold(
        self,
        question: str,
        floor: CalibratedFloor,
        provider: str,
        model: str | None,
        question_type: str | None = None,
    ) -> Threshold:
        """The floor to judge this answer by, and where it came from. ``question_type``: only
        labels of that type count (a question id reused with another type is another
        question); None counts every type."""
        found = self._found((question, question_type, provider, model, floor.calibrated))
        value, labels = found
        if value is None:
            return Threshold(
                value=floor.fallback, source="fallback", target=floor.calibrated, labels=labels
            )
        return Threshold(value=value, source="calibrated", target=floor.calibrated, labels=labels)

    async def prefetch(self, job: DecideJob, provider: str, model: str | None) -> None:
        """Read, on a thread, every expired suggestion ``job``'s calibrated questions need."""
        stale = [
            (qid, q.type, provider, model, q.escalate_below.calibrated)
            for qid, q in job.questions.items()
            if isinstance(q.escalate_below, CalibratedFloor)
        ]
        stale = [key for key in stale if self._cached(key) is None]
        if stale:
            await asyncio.to_thread(lambda: [self._found(key) for key in stale])

    def _cached(self, key: _Key) -> _Found | None:
        with self._lock:
            entry = self._cache.get(key)
        if entry is None or entry[0] <= self.clock():
            return None
        return entry[1]

    def _found(self, key: _Key) -> _Found:
        cached = self._cached(key)
        if cached is not None:
            return cached
        question, question_type, provider, model, target = key
        try:
            self.queries += 1
            where = LabelFilter(
                question=question, question_type=question_type, provider=provider, model=model
            )
            rows = self.ledger.labels(where)
            figures = report(scored(rows), target=target, min_labels=self.min_labels)
            suggestion = figures.suggestion
            found: _Found = (
                None if suggestion is None else suggestion.threshold,
                figures.labels,
            )
        except LedgerError as exc:
            log.warning("calibration.unreadable", question=question, error=type(exc).__name__)
            found = (None, 0)
        except Exception as exc:
            # Anything else is a bug or a row no check foresaw; it runs after the call's claim
            # and before its send, so raising would leave the call claimed, to be booked
            # "possibly sent" though never sent. The fallback is what a job asks for then.
            log.warning(
                "calibration.uncomputable",
                question=question,
                error=type(exc).__name__,
                detail=scrub.error_text(exc, 200),
            )
            found = (None, 0)
        with self._lock:
            self._cache[key] = (self.clock() + self.ttl_s, found)
        return found
