"""A transaction aborted for a conflict with another is run again: no outage, nothing lost.

PostgreSQL aborts one of two transactions that wait on each other's row locks (SQLSTATE
40P01, ``deadlock_detected``), and a transaction that cannot be serialized beside another
(40001). The group commit runs many jobs' writes in one transaction, and a judgment claim
locks its job's row for update, so two deliveries of the same jobs whose batches cross (one
locks job 1 then job 2, the other job 2 then job 1) deadlock, and one batch is aborted.

The aborted transaction committed nothing, the server is up, and the other transaction ends
in moments: the same writes run again go through, and see what the other committed (a claim
it made is read back as not fresh, never made twice; a terminal message it stored wins). So
the ledger runs the transaction again itself, from its beginning, at most ``CONFLICT_TRIES``
times in all, after a short pause with jitter (two transactions aborted together must not
meet again in step), and says so in a WARNING ``ledger.conflict`` line with its SQLSTATE and in
``decisions_ledger_conflicts_total{sqlstate, retried}`` (each aborted try: ``retried="yes"``
when it is run again, ``"no"`` when it was the last).
Held as an outage instead, the batch's claims failed "ledger unavailable" and their jobs
waited out the task's retry with backoff.

A conflict that outlasts its tries is raised as a ``LedgerConflict`` that says so, and is
handled as an outage is (it is a ``LedgerUnavailable``): retried later, never dropped.

Only a whole transaction is run again, by whoever began it (the group commit's batch, a
``Ledger`` write method): PostgreSQL has aborted every statement of it, so what any of them
read or decided is void. The caller makes sure nothing outside the database kept a trace of
the aborted try (``GroupCommit`` resets its writes' results before each try).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Final, ParamSpec, TypeVar

import structlog

from worker.ledger.errors import LedgerConflict

__all__ = [
    "CONFLICT_PAUSE_MAX_S",
    "CONFLICT_PAUSE_S",
    "CONFLICT_TRIES",
    "conflict_pause",
    "conflicts_retried",
    "retry_conflicts",
]

log = structlog.get_logger("decisions.ledger")

#: Tries of one transaction in all (the first and three more): a deadlock needs two
#: transactions locking crossing rows at once, so one more try all but always goes through.
CONFLICT_TRIES: Final = 4
#: The pause before the first try again; it doubles after each, up to the max, and is
#: jittered between half and all of it. The other transaction holds its locks for a batch's
#: few milliseconds; PostgreSQL took ``deadlock_timeout`` (1 s by default) to find the cycle.
CONFLICT_PAUSE_S: Final = 0.02
CONFLICT_PAUSE_MAX_S: Final = 0.2

T = TypeVar("T")
P = ParamSpec("P")


def conflict_pause(tried: int) -> float:
    """The pause after the ``tried``-th try failed for a conflict, in seconds."""
    ceiling = min(CONFLICT_PAUSE_S * 2 ** (tried - 1), CONFLICT_PAUSE_MAX_S)
    return random.uniform(ceiling / 2, ceiling)  # jitter, not crypto


def retry_conflicts(attempt: Callable[[], T], *, operation: str) -> T:
    """``attempt()`` (one whole transaction), run again after each ``LedgerConflict`` up to
    ``CONFLICT_TRIES`` tries in all; every other error is raised at once, as it came."""
    tried = 1
    while True:
        try:
            return attempt()
        except LedgerConflict as conflict:
            retrying = tried < CONFLICT_TRIES
            log.warning(
                "ledger.conflict",
                operation=operation,
                sqlstate=conflict.sqlstate,
                attempt=tried,
                tries=CONFLICT_TRIES,
                retrying=retrying,
                error=str(conflict),
            )
            _count(conflict.sqlstate, retrying)
            if not retrying:
                raise LedgerConflict(
                    f"{conflict}; still so after {tried} tries", conflict.sqlstate
                ) from conflict
            time.sleep(conflict_pause(tried))
            tried += 1


def _count(sqlstate: str, retrying: bool) -> None:
    try:
        # Imported here: the metrics package is the worker's (prometheus-client the optional
        # [metrics] extra); the ledger is a library too.
        from worker.observability.metrics.families import families

        families().ledger_conflicts.labels(
            sqlstate=sqlstate, retried="yes" if retrying else "no"
        ).inc()
    except Exception:  # a metrics failure must never fail the write it counts
        log.debug("metrics.unavailable", exc_info=True)


def conflicts_retried(method: Callable[P, T]) -> Callable[P, T]:
    """A ledger method that runs one transaction, run again on a conflict (by its name)."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return retry_conflicts(lambda: method(*args, **kwargs), operation=method.__name__)

    return run
