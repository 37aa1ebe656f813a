"""Saying loudly why a fleet worker's messages retry: the outages ``RETRIED`` names.

A chunk whose ledger cannot be written (a read-only or full SQLite file, PostgreSQL down) or
whose reply streams' Redis is gone is retried by Celery for ever, with back-off, and safely
(nothing unclaimed was sent); not so once the ledger's tables were dropped under the worker,
and the line says so (``WIPED_HINT``). Celery says each retry at INFO, one line a message, with the
exception's text only: an outage that makes *every* message retry looked like a quiet worker.
``say_retry`` logs it at ERROR (``worker.retrying``) with what is wrong and its fix (for a
SQLite file, why it cannot be written: ``worker.cli.ledger_file``), at most once a minute for
each problem in a process, so a thousand messages retrying make one line, not a thousand.

Connected by ``worker.app`` for fleet workers only: ``decisions run`` says its own retries
(``worker.cli.run.LedgerRetries``) and stops on the ones no retry mends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

import structlog

from worker.ledger.errors import TablesMissing

__all__ = ["OUTAGE_HINT", "SAID_EVERY_S", "WIPED_HINT", "RetryReporter"]

log = structlog.get_logger("decisions.worker")

#: How often one problem is said again in a process while messages keep retrying for it.
SAID_EVERY_S: Final = 60.0
#: What retrying an outage costs: nothing, the ledger remembers every claim.
OUTAGE_HINT: Final = (
    "every message that meets this retries with back-off until it is mended; "
    "nothing unclaimed was sent, and nothing is sent twice"
)
#: What it costs when the ledger's tables went away under the worker (they were there when it
#: started: it checks): the claims went with them, so no retry can promise "not twice". The
#: messages still retry rather than fail: a failed message is a job lost with no reply, and
#: only the operator can choose between restoring the rows (keeping the promise as far as the
#: backup goes) and a new ledger (a resend of what was in flight); either way the retries
#: then carry the batch on by themselves.
WIPED_HINT: Final = (
    "the ledger's tables were there when this worker started and are gone, with the claims "
    "that keep a call from being sent twice: messages retry with back-off until they are "
    "back, and a call in flight when they went may then be sent, and paid for, again "
    "(restoring them from a backup keeps what it recorded)"
)


class RetryReporter:
    """A ``task_retry`` receiver: says each retried outage at ERROR, once a minute a problem."""

    def __init__(
        self,
        retried: tuple[type[BaseException], ...],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retried = retried
        self.clock = clock
        self._said: dict[str, float] = {}
        self._lock = threading.Lock()  # retries come from pool threads too

    def __call__(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        # Celery passes the Retry it raised; autoretry puts the outage in its ``exc``.
        error = getattr(reason, "exc", reason)
        if not isinstance(error, self.retried):
            return
        problem, fix = _explained(error)
        now = self.clock()
        with self._lock:
            last = self._said.get(problem)
            if last is not None and now - last < SAID_EVERY_S:
                return
            self._said[problem] = now
        log.error(
            "worker.retrying",
            problem=problem,
            fix=fix,
            hint=WIPED_HINT if isinstance(error, TablesMissing) else OUTAGE_HINT,
        )


def _explained(error: BaseException) -> tuple[str, str | None]:
    """What ``decisions`` would say of ``error`` (its password-free problem and fix)."""
    # Imported here: the explanations import much of the CLI, needed only when retrying.
    from worker.cli.errors import explain

    try:
        explanation = explain(error)
    except Exception:  # an explanation must never cost the retry its line
        return type(error).__name__, None
    # A command is run again by whoever ran it; a worker's message retries by itself.
    fix = explanation.fix.removesuffix("; then run the command again") if explanation.fix else None
    return explanation.problem, fix
