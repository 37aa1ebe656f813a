"""Fault points: where the fault-injection suite kills a worker on purpose.

Set ``DECISIONS_FAULT_POINT`` to one of FAULT_POINTS (and optionally ``DECISIONS_FAULT_JOB``
to a job id) and the worker process SIGKILLs itself when it reaches that point: the same
``kill -9`` an operator or the OOM killer delivers, at a boundary chosen by the test. Unset
(the default, and in production) a fault point costs one comparison.
"""

from __future__ import annotations

import os
import signal

__all__ = ["FAULT_POINTS", "fault_point"]

FAULT_POINTS = (
    "after_claim",  # the claim is committed, nothing sent yet
    "after_response",  # the provider answered; the outcome is not recorded
    "after_record",  # outcome and terminal message are committed; nothing published
    "after_publish",  # published; the broker message is not acknowledged
)

_POINT = os.environ.get("DECISIONS_FAULT_POINT") or None
_JOB = os.environ.get("DECISIONS_FAULT_JOB") or None


def fault_point(name: str, job_id: str) -> None:
    if _POINT is None or name != _POINT or (_JOB is not None and job_id != _JOB):
        return
    # Kill the whole worker (parent and pool), as `kill -9` of the worker would.
    if os.environ.get("DECISIONS_FAULT_KILL_GROUP") == "1":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
