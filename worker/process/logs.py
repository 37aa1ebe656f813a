"""Structured logs: one JSON event per line for a log pipeline, readable lines on a terminal.

structlog events and the standard library's records (Celery's own: "ready.", task received,
pool processes exiting) go through one handler on the real stderr, so a worker's output is
one format only. Events carry the job id, batch, call step, provider and outcome as fields.

Never a key, an auth header or a body: those never reach a log call in the first place
(providers log only exception class names and phases); as a second line of defence, fields
named like secrets or payloads are dropped and passwords in URLs are masked before rendering.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

from shared.scrub import mask_urls

__all__ = [
    "SAYS_ITSELF",
    "LogFormat",
    "OmitMessageContents",
    "RemoteControlErrors",
    "SelfExplainedFailures",
    "add_process",
    "configure_logging",
    "is_configured",
    "mask_passwords",
    "redact",
    "resolve_format",
]

LogFormat = Literal["auto", "json", "console"]

#: Field names whose values never reach a log line, whoever passes them: exact names, and
#: suffixes (``openrouter_api_key``, ``x_auth_token``, ``request_body``).
_SECRET_NAMES = frozenset(
    {"key", "auth", "state", "content", "data", "json", "message_json", "job_json"}
)
_SECRET_SUFFIX = re.compile(
    r"(^|_)(api_?key|token|secret|password|passwd|authorization|cookie|headers?|body|payload)$",
    re.IGNORECASE,
)
# scheme://user:password@host -> scheme://user:***@host (Celery masks its own banner; a URL
# in an exception message passed through a log call is not masked by anyone else).
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@", re.IGNORECASE)
REDACTED = "[redacted]"
_HANDLER_NAME = "decisions"

_configured = False


def resolve_format(fmt: LogFormat, stream: TextIO | None = None) -> Literal["json", "console"]:
    """``auto`` is JSON unless the process's real stderr is a terminal."""
    if fmt != "auto":
        return fmt
    # sys.__stderr__: Celery may have swapped sys.stderr for a logging proxy (never a tty).
    target = stream or sys.__stderr__
    try:
        return "console" if target is not None and target.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def mask_passwords(value: str) -> str:
    """``scheme://user:secret@host`` anywhere in ``value`` becomes ``scheme://user:***@host``,
    and a password in a URL's query (``?password=``, which libpq and redis-py take) ``***``."""
    return mask_urls(_URL_PASSWORD.sub(r"\1***@", value))


def add_process(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: the process id (a prefork worker's pool processes share a log).

    Not ``CallsiteParameterAdder``: it walks the caller's frames on every event to find
    them, even when only the process id is asked for (3% of a busy worker's CPU)."""
    event_dict.setdefault("process", os.getpid())
    return event_dict


def redact(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: drop secret-looking fields, mask URL passwords in strings."""
    for name in list(event_dict):
        if name == "event":
            continue
        if name.lower() in _SECRET_NAMES or _SECRET_SUFFIX.search(name):
            event_dict[name] = REDACTED
            continue
        value = event_dict[name]
        if isinstance(value, str) and ("@" in value or "://" in value):
            event_dict[name] = mask_passwords(value)
    event = event_dict.get("event")
    if isinstance(event, str) and ("@" in event or "://" in event):
        event_dict["event"] = mask_passwords(event)
    return event_dict


class OmitMessageContents(logging.Filter):
    """Celery's consumer logs up to 1 KiB of a message it refuses (invalid, unknown, not
    decodable) and its headers, whose ``argsrepr`` is the jobs again: a job's state, personal
    data included, in the worker's log. Its lines stay, their contents go: an exception stays
    (it names what was wrong), every other argument is replaced. The guard's ``task.poison``
    line says which message it was. (A filter on Celery's logger: Celery has no setting.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "body" in record.msg and isinstance(record.args, tuple):
            record.args = tuple(
                a if isinstance(a, BaseException) else _LEFT_OUT for a in record.args
            )
        return True


_LEFT_OUT = "(left out: a message's contents are not logged)"
#: The logger Celery's consumer reports refused messages on.
_CONSUMER_LOGGER = "celery.worker.consumer.consumer"


class RemoteControlErrors(logging.Filter):
    """A remote-control command an operator got wrong (``celery control pool_grow`` on the
    loop pool, ``terminate NOTASIG``, ``rate_limit`` for a task that does not exist, a library
    ``inspect objgraph`` needs) is answered with the error, and kombu and Celery also log it
    at ERROR with a traceback of their own code. The line stays (what was asked, what was
    wrong); the traceback goes, unless the worker logs at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            record.exc_info = None
            record.exc_text = None
        return True


#: The loggers Celery's remote control reports a command's failure on.
_CONTROL_LOGGERS = ("kombu.pidbox", "celery.worker.control")

#: The class attribute of an exception whose message says all an operator needs (what was
#: refused, by what, and that no retry mends it): its failed task's line needs no traceback.
#: An attribute, not a class list, so this module imports none of the project.
SAYS_ITSELF = "says_itself"


class SelfExplainedFailures(logging.Filter):
    """Celery logs a task that failed at ERROR with the traceback of the exception. For one
    that says itself (``SAYS_ITSELF``: a ledger statement past a server limit, say) the line
    stays, naming the exception and its message; the traceback goes, unless the worker logs
    at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if getattr(error, SAYS_ITSELF, False) is True and not logging.getLogger(
            record.name
        ).isEnabledFor(logging.DEBUG):
            record.exc_info = None
            record.exc_text = None
        return True


#: The logger Celery reports a task's failure on.
_TASK_TRACE_LOGGER = "celery.app.trace"


def is_configured() -> bool:
    """Whether ``configure_logging`` ran in this process (a later Celery setup keeps it)."""
    return _configured


def configure_logging(level: str | int = "INFO", fmt: LogFormat = "auto") -> None:
    """Route structlog and the standard library through one renderer on stderr."""
    global _configured
    rendered = resolve_format(fmt)
    numeric = level if isinstance(level, int) else _level_number(level)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_process,
    ]
    renderer: structlog.typing.Processor
    if rendered == "json":
        tail: list[structlog.typing.Processor] = [
            structlog.processors.format_exc_info,
            redact,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(sys.__stderr__))
        tail = [redact, renderer]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.UnicodeDecoder(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
    )
    handler = logging.StreamHandler(sys.__stderr__)
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    # Replace our own handler only: others on the root (pytest's capture, say) stay.
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # Celery's loggers keep handlers of their own when it set them up first; ours wins.
    for name in ("celery", "celery.task", "celery.redirected"):
        named = logging.getLogger(name)
        named.handlers = []
        named.propagate = True
    consumer = logging.getLogger(_CONSUMER_LOGGER)
    if not any(isinstance(f, OmitMessageContents) for f in consumer.filters):
        consumer.addFilter(OmitMessageContents())
    for name in _CONTROL_LOGGERS:
        control = logging.getLogger(name)
        if not any(isinstance(f, RemoteControlErrors) for f in control.filters):
            control.addFilter(RemoteControlErrors())
    trace = logging.getLogger(_TASK_TRACE_LOGGER)
    if not any(isinstance(f, SelfExplainedFailures) for f in trace.filters):
        trace.addFilter(SelfExplainedFailures())
    # No line shows where a call was made from, so never look it up (the logging HOWTO's
    # "Optimization": a frame walk per record otherwise).
    logging._srcfile = None
    # httpx logs every request at INFO; the worker's own call.finished says more, once.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
    logging.captureWarnings(True)
    _configured = True


def _level_number(level: str) -> int:
    return logging.getLevelNamesMapping().get(level.upper(), logging.INFO)


def _isatty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False
