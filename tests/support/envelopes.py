"""Celery task messages as kombu's Redis transport stores them on the queue: what a producer
of Celery's own (or anyone who can write to the broker) pushes, for the guard's tests."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from shared import keys

__all__ = ["raw_envelope", "task_body"]


def raw_envelope(payload: bytes, **patch: Any) -> dict[str, Any]:
    """A Redis transport envelope of the ``run_jobs`` task (``patch``: top-level fields, or
    ``headers``/``properties`` merged in)."""
    task_id = str(uuid.uuid4())
    envelope: dict[str, Any] = {
        "body": base64.b64encode(payload).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"lang": "py", "task": keys.RUN_JOBS_TASK, "id": task_id, "retries": 0},
        "properties": {
            "body_encoding": "base64",
            "delivery_info": {"exchange": keys.CELERY_QUEUE, "routing_key": keys.CELERY_QUEUE},
            "priority": 0,
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    for name, value in patch.items():
        if name in ("headers", "properties") and isinstance(value, dict):
            envelope[name] = {**envelope[name], **value}
        else:
            envelope[name] = value
    return envelope


def task_body(*jobs: Any) -> bytes:
    """A protocol 2 body of ``run_jobs`` with these jobs."""
    return json.dumps([[], {"jobs": list(jobs)}, {}]).encode()
