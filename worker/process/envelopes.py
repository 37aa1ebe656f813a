"""Redis transport envelopes a worker cannot take in, and the poison envelopes standing for them.

Kombu's Redis transport decodes each queue item's envelope (headers, properties, the body
still encoded) itself, in the consumer's loop, before any task strategy runs: what it or
Celery raises there is an "Unrecoverable error" that stops the worker, and the item goes
back to the queue to stop the next one. So an envelope is read here (``envelope_loads``, the
transport's ``loads``) and checked when the broker's channel delivers it
(``checked_envelope``, from ``worker.process.broker``); one nobody could take in is replaced
by a *poison envelope*: a well-formed message under our task name whose headers say what was
wrong (``POISON_HEADER``) and why (``POISON_REASON_HEADER``). The guard
(``worker.process.guard``) drops it with a log line and a metric, and it is acknowledged
like any dropped message.

Apart from the guard because this is about the transport's wrapping, read before a task
message exists; the guard checks the task message itself (its shape, headers and jobs).
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any, Final

from kombu.utils import json as kombu_json

from shared import strict_json
from shared.keys import CELERY_QUEUE, RUN_JOBS_TASK

__all__ = [
    "POISON_HEADER",
    "POISON_REASON_HEADER",
    "checked_envelope",
    "envelope_loads",
    "envelope_problem",
    "poison_envelope",
    "poison_reason",
]

#: The header of a poison envelope: what made the envelope it stands for unreadable.
POISON_HEADER: Final = "x-decisions-unreadable-envelope"
#: ... and its ``reason`` label, one of ``_ENVELOPE_REASONS`` (``poison_reason``).
POISON_REASON_HEADER: Final = "x-decisions-poison-reason"
#: What a poison envelope may stand for: an envelope kombu could not take in, or an item
#: over ``max_message_bytes`` that nothing decoded (``worker.process.broker``).
_ENVELOPE_REASONS: Final = frozenset({"unreadable_envelope", "oversize_message"})


def envelope_loads(data: Any, *args: Any, **kwargs: Any) -> Any:
    """``kombu.utils.json.loads``, reading text too deep for the parser around its depths,
    and standing a poison envelope (``poison_envelope``) for one nobody could take in."""
    try:
        try:
            envelope = kombu_json.loads(data, *args, **kwargs)
        except RecursionError:
            text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
            envelope = kombu_json.loads(strict_json.clip_deep(text), *args, **kwargs)
    except ValueError as exc:  # only a list item can be this: kombu writes its own hash
        return poison_envelope(f"envelope: not JSON: {exc}")
    # Not checked here: kombu reads its unacked hash (a list, not an envelope) through this
    # too. The transport's delivery checks what it is handed (``checked_envelope``).
    return envelope


def checked_envelope(envelope: Any) -> Any:
    """``envelope`` itself, or a poison envelope standing for it when kombu or Celery could
    not take it in (``envelope_problem``): what ``worker.process.broker`` delivers."""
    problem = envelope_problem(envelope)
    return envelope if problem is None else poison_envelope(f"envelope: {problem}")


def envelope_problem(envelope: Any) -> str | None:
    """What in a Redis transport envelope kombu or Celery would raise on outside any handler,
    or None. Seen, each pushed by hand onto the queue: ``42``, a body that is not base64, a
    ``task`` header that is a list. Each raised in the consumer's loop, an "Unrecoverable
    error" that stopped the worker; a message it had taken went back to the queue and stopped
    the next one. Pidbox messages (no ``task`` header) read the same way and pass."""
    if not isinstance(envelope, dict):
        return f"a JSON {type(envelope).__name__}, not an object"
    properties = envelope.get("properties")
    if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
        return "no properties with a delivery tag"
    info = properties.get("delivery_info")
    if not isinstance(info, dict) or not {"exchange", "routing_key"} <= info.keys():
        # kombu's delivery reads both: a KeyError there reconnected the consumer over and over.
        return "no delivery_info with an exchange and a routing key"
    body = envelope.get("body")
    if not isinstance(body, str):  # None: Celery's own error report raised on its len()
        return "the body is not text"
    if body:
        encoding = properties.get("body_encoding")
        if encoding not in (None, "base64"):
            return f"unknown body encoding {str(encoding)[:40]!r}"
        if encoding == "base64":
            try:
                base64.b64decode(body, validate=True)  # kombu's own is strict base64
            except ValueError:
                return "the body is not base64"
    for name in ("content-type", "content-encoding"):
        if not isinstance(envelope.get(name), str | None):
            return f"{name} is not text"
    headers = envelope.get("headers")
    if headers and not isinstance(headers, dict):
        return "the headers are not an object"
    if isinstance(headers, dict) and headers.get("compression"):
        # No producer of ours compresses; kombu would inflate it here without a bound.
        return "a compressed body"
    if isinstance(headers, dict) and "task" in headers and not isinstance(headers["task"], str):
        return "the task header is not a name"
    if isinstance(headers, dict) and "task" not in headers and body:
        # No task header: Celery reads the body as protocol 1 and looks its "task" up.
        return _v1_task_problem(body, properties.get("body_encoding"))
    return None


def _v1_task_problem(body: str, encoding: Any) -> str | None:
    try:
        raw = base64.b64decode(body) if encoding == "base64" else body
        decoded = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # Celery's own decode fails and it drops the message
    if isinstance(decoded, dict) and "task" in decoded and not isinstance(decoded["task"], str):
        return "the body's task is not a name"
    return None


def poison_envelope(problem: str, reason: str = "unreadable_envelope") -> dict[str, Any]:
    """An envelope kombu takes in and the guard drops (a log line, a metric by ``reason``),
    standing for one that could not be read: acknowledged like any dropped message, so it
    stops nobody."""
    tag = str(uuid.uuid4())
    return {
        "body": "",
        "content-type": "application/x-decisions-poison",
        "content-encoding": "binary",
        "headers": {
            "task": RUN_JOBS_TASK,
            "id": tag,
            POISON_HEADER: problem[:300],
            POISON_REASON_HEADER: reason,
        },
        "properties": {
            "delivery_tag": tag,
            "delivery_info": {"exchange": "", "routing_key": CELERY_QUEUE},
            "body_encoding": "base64",
            "priority": 0,
        },
    }


def poison_reason(headers: Any) -> str:
    """The ``reason`` of a poison envelope's headers: the one it names when a poison envelope
    may stand for it, else ``unreadable_envelope`` (an envelope pushed by hand with our
    header names what it likes; the metric's labels stay a fixed set)."""
    named = headers.get(POISON_REASON_HEADER) if isinstance(headers, dict) else None
    return named if isinstance(named, str) and named in _ENVELOPE_REASONS else "unreadable_envelope"
