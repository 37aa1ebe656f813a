"""A guard in front of Celery's task strategy: a malformed task message is dropped, not fatal.

Celery's worker unpacks a task message's body as ``[args, kwargs, embed]`` in its main
process. A body of any other shape under a known task name (seen here: ``{"not": "a task
body"}`` under ``decisions.run_jobs``) raises ``ValueError`` there, which Celery treats as an
unrecoverable error: the worker exits, the message goes back to the queue, and it stops the
next worker that takes it too. The guard checks the shape first and raises
``InvalidTaskError``, which Celery answers by logging the message and rejecting it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.exceptions import InvalidTaskError
from celery.worker.strategy import default

__all__ = ["checked_strategy", "malformed"]


def malformed(message: Any) -> str | None:
    """What is wrong with a protocol 2 task message's shape, or None."""
    headers = message.headers
    if not isinstance(headers.get("id"), str):
        return "no task id in the headers"
    timelimit = headers.get("timelimit")
    if timelimit and not (isinstance(timelimit, list | tuple) and len(timelimit) == 2):
        return "timelimit is not a (soft, hard) pair"
    # Undecodable or disallowed content (pickle) raises here, handled by Celery as usual.
    payload = message.payload
    if not (isinstance(payload, list | tuple) and len(payload) == 3):
        return f"the body is not [args, kwargs, embed] but {type(payload).__name__}"
    args, kwargs, embed = payload
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        return "the body's args are not a list or its kwargs not an object"
    if embed is not None and not isinstance(embed, dict):
        return "the body's embed is not an object"
    return None


def checked_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Callable[..., Any]:
    """Celery's default strategy, refusing malformed messages (``Task.Strategy`` points here)."""
    handle = default(task, app, consumer, **kwargs)

    def task_message_handler(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **options: Any
    ) -> Any:
        problem = malformed(message)
        if problem is not None:
            raise InvalidTaskError(f"{task.name}: {problem}")
        return handle(message, body, ack, reject, callbacks, **options)

    return task_message_handler
