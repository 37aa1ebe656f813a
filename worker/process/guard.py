"""A guard in front of Celery's task strategy: no message can stop the worker or reach its
pool unchecked.

Celery's worker unpacks a task message in its main process and hands it to a pool process
by pickling the decoded arguments. Whatever a message holds must survive that:

- **Bodies are strict JSON.** ``use_strict_json`` registers ``shared.strict_json``'s reader
  as kombu's ``application/json`` decoder, when the task is registered (so in the main
  process and in every pool process it forks): a body that is not UTF-8 or not JSON, or
  nests too deep to parse, is a ``DecodeError``, which Celery logs and drops; NaN and
  duplicate keys are marked for the job's check to name.
- **Shape.** A body of any other shape than ``[args, kwargs, embed]`` under a known task
  name (seen: ``{"not": "a task body"}``) raised ``ValueError`` there, which Celery treats as
  unrecoverable: the worker exited and the message stopped the next worker too. Such a
  message, and headers or arguments too deep or too large to hand on, raise
  ``InvalidTaskError``, which Celery answers by logging and dropping the message.
- **Jobs.** Every job is checked against the input limits (``shared.limits.job_problems``,
  the same check as ``Client``'s) on the decoded body. A job that breaks one (a state 600
  levels deep raised ``RecursionError`` while pickling and killed the worker; 300 deep was
  lost in pydantic's serialisation) is replaced by a small refused job carrying its id,
  reply stream and problems, and the body is re-encoded: its pool process publishes the
  ``rejected`` reply as for any invalid job, and the rest of the chunk goes on.
- **Size.** An item on the queue longer than ``DECISIONS_MAX_MESSAGE_BYTES`` is never
  decoded: the broker's channel (``worker.process.broker``) hands kombu a poison envelope
  for it instead, dropped here as ``oversize_message``.
- **Envelopes.** What wraps a message on the Redis queue is read and checked before any of
  this (``worker.process.envelopes``); one kombu or Celery could not take in arrives here as
  a poison envelope, dropped as ``unreadable_envelope``.
- Anything else Celery raises while taking the message in becomes ``InvalidTaskError``
  (never a dead worker); connection errors go on to Celery, which reconnects.

Each refusal is a log line (``task.poison``) and ``decisions_poison_total{reason}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import structlog
from celery.exceptions import InvalidTaskError
from celery.worker.strategy import default
from kombu import serialization
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.transport import redis as redis_transport
from kombu.utils import json as kombu_json

from shared import json_measure, strict_json
from shared.errors import FieldProblem
from shared.limits import Limits, current_limits, job_problems, refused_job
from shared.settings import get_settings
from worker.observability.metrics.families import families
from worker.process.envelopes import POISON_HEADER, envelope_loads, poison_reason

__all__ = [
    "ETA_SLACK_S",
    "MAX_RETRY_COUNT",
    "POISON_REASONS",
    "checked_strategy",
    "contain",
    "malformed",
    "unscheduled",
    "use_strict_json",
]

log = structlog.get_logger("decisions.guard")

#: The ``reason`` label values of ``decisions_poison_total`` (a fixed set).
POISON_REASONS: Final = (
    "undecodable",
    "disallowed_content",
    "malformed",
    "oversize_headers",
    "job_refused",
    "unexpected_error",
    "unreadable_envelope",
    "oversize_message",
)
#: Headers are Celery's own few fields: far below this.
MAX_HEADER_BYTES: Final = 64 * 1024


def use_strict_json() -> None:
    """Decode ``application/json`` task bodies with ``shared.strict_json`` (this process and
    the pool processes it forks later), and let the Redis transport read any envelope.

    The Redis transport decodes each message's envelope (headers, properties) itself, before
    any strategy runs: an envelope pushed by hand with headers 3,000 levels deep raised
    ``RecursionError`` there, an "Unrecoverable error" that stopped the worker. Its ``loads``
    is replaced by one that reads such an envelope with the deep values cut out
    (``worker.process.envelopes.envelope_loads``); the guard then drops the message for its
    headers. An envelope kombu or Celery cannot take in at all is replaced too, by a poison
    envelope (``worker.process.envelopes``).
    """
    serialization.register("json", kombu_json.dumps, strict_json.loads, "application/json", "utf-8")
    redis_transport.loads = envelope_loads  # type: ignore[assignment]


def malformed(message: Any) -> str | None:
    """What is wrong with a protocol 2 task message's shape, or None."""
    headers = message.headers
    if not isinstance(headers.get("id"), str):
        return "no task id in the headers"
    # Undecodable or disallowed content (pickle) raises here, handled by Celery as usual.
    payload = message.payload
    if not (isinstance(payload, list | tuple) and len(payload) == 3):
        return f"the body is not [args, kwargs, embed] but {type(payload).__name__}"
    args, kwargs, embed = payload
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        return "the body's args are not a list or its kwargs not an object"
    if embed is not None and not isinstance(embed, dict):
        return "the body's embed is not an object"
    # The task takes one argument, ``jobs``: anything else raised TypeError in the task,
    # and its jobs were lost with no reply, no poison line and no metric.
    if len(args) + len(kwargs) != 1 or (kwargs and "jobs" not in kwargs):
        return "the task takes one argument, jobs"
    return None


#: Clocks of the worker that wrote an ``eta`` (a retry's) and the one reading it may differ.
ETA_SLACK_S: Final = 60.0
#: The most retries a message is taken to have made: Celery's next backoff is
#: ``2 ** retries`` (the task retries for ever), and a forged 10**12 would take the
#: worker's memory. Real retries reach the backoff's longest wait after five.
MAX_RETRY_COUNT: Final = 1000


def unscheduled(
    headers: dict[str, Any], longest_wait_s: float, retry_wait_s: float = 0.0
) -> list[FieldProblem]:
    """The problems of a message's scheduling headers, each cleared in ``headers`` (so
    that Celery neither holds the message nor drops it as expired: its jobs are refused).

    An ``eta`` (Celery's ``countdown`` too) further than ``longest_wait_s`` (and some
    clock slack) ahead, on a message that is no retry (a retry's waits ``retry_wait_s``):
    no job waits longer than the deadline ceiling, and the worker's own retries
    (``autoretry_for``) wait at most their backoff. Before, an ``eta`` ten years
    ahead was held in the worker's memory for good, and put back by the visibility timeout
    for another worker to hold. An ``expires``, which nothing of ours sets: an expired
    message was acknowledged as revoked. Either way its jobs were never answered."""
    problems = []
    if _retried(headers) and headers["retries"] > MAX_RETRY_COUNT:
        headers["retries"] = MAX_RETRY_COUNT
    eta = headers.get("eta")
    if eta is not None:
        when = _instant(eta)
        now = datetime.now(UTC)
        latest = now + timedelta(seconds=longest_wait_s + ETA_SLACK_S)
        if when is not None and when <= now:
            # Due: it runs now, as Celery would run it, without Celery converting a time it
            # may not convert (found by an attack: 0001-01-01T00:00:00+23:59 raised in its
            # strategy, which logged a traceback and dropped the message, its job unanswered).
            headers["eta"] = None
        elif when is not None and when > latest and _retried(headers):
            # The fleet's own retry, its eta set by a worker whose clock runs ahead (found by
            # an attack: an hour fast, its retried jobs were rejected here, and the reaper
            # published each one's stored result too: a second terminal message). It waits
            # its backoff's longest by this worker's clock instead: sooner than its writer
            # meant is harmless, as deadlines come from the ledger's clock; at once would
            # fail at once through the outage it retries for, again and again. A forged
            # retry count only makes a message wait that long.
            log.warning("task.eta_ahead", eta=str(eta)[:40], ahead_s=_ahead_s(when))
            soon = datetime.now(UTC) + timedelta(seconds=retry_wait_s)
            headers["eta"] = soon.isoformat() if retry_wait_s > 0 else None
        elif when is not None and when <= latest:
            # Kept, in the one spelling Celery reads as this check did (found by an attack:
            # "...+00:00:00" and "....Z" read here, not by Celery's own parser, which then
            # dropped the message with a traceback, its job unanswered).
            headers["eta"] = when.astimezone(UTC).isoformat()
        else:
            problems.append(FieldProblem(
                "eta",
                f"a message may not wait more than {longest_wait_s:g} s (its eta or countdown; "
                "DECISIONS_DEADLINE_CEILING_S): jobs have deadlines, not schedules; submit "
                "them when they should run",
            ))
            headers["eta"] = None
    if headers.get("expires") is not None:
        problems.append(FieldProblem(
            "expires",
            "a message may not expire (Celery would drop its jobs unanswered); a job's "
            "timeout_s or deadline says how long it may wait",
        ))
        headers["expires"] = None
    return problems


def _retried(headers: dict[str, Any]) -> bool:
    retries = headers.get("retries")
    return isinstance(retries, int) and not isinstance(retries, bool) and retries > 0


def _ahead_s(when: datetime) -> int:
    return int((when - datetime.now(UTC)).total_seconds())


def _instant(value: Any) -> datetime | None:
    """An ISO 8601 time as Celery writes ``eta`` (UTC when it names no offset), or None."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def disarm(headers: dict[str, Any]) -> None:
    """Make harmless, in place, the headers Celery reads and nothing of this project sets:
    the message runs as if they were absent. A job has a deadline, not a time limit of its
    producer's, and no job is revoked by stamp.

    Found by attacks: a ``timelimit`` of ["x", "y"] stopped a prefork worker's consumer
    (Celery's "unrecoverable error"; the message, put back, stopped the next), one of [1e-6,
    1e-6] killed the task mid-request, its job never answered, and one not a pair (30, [30],
    an object) was refused whole, its readable jobs unanswered; a ``stamped_headers`` holding
    a list raised in Celery's revocation check, after the guard, and the message was dropped.
    """
    timelimit = headers.get("timelimit")
    if timelimit is not None and timelimit != [None, None]:
        log.info("task.timelimit_ignored", task_id=str(headers.get("id"))[:80])
        headers["timelimit"] = [None, None]
    stamped = headers.get("stamped_headers")
    if stamped is not None and not (
        isinstance(stamped, list) and all(isinstance(name, str) for name in stamped)
    ):
        headers["stamped_headers"] = None
    if headers.get("stamps") is not None and not isinstance(headers["stamps"], dict):
        headers["stamps"] = None
    retries = headers.get("retries")
    if "retries" in headers and not (
        isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0
    ):
        # Celery's retry adds one to it and its backoff raises two to it: "1" or null made
        # the retry of an outage raise instead (a round three item, found by reading).
        headers["retries"] = 0


def contain(
    payload: Any, limits: Limits, every: list[FieldProblem] | None = None
) -> tuple[str | None, int]:
    """Check a well-shaped body: (what makes the whole message unusable or None, how many
    jobs were replaced by refused jobs, in place). ``every``: problems of the message
    (``unscheduled``), which refuse each of its jobs."""
    args, kwargs, embed = payload
    # The jobs as the task takes them: by name, or as its one positional argument (which
    # the pool reads too, ``worker.process.pool.message_jobs``). Positional ones were
    # measured as a whole, their limits and the message's scheduling problems unchecked
    # (found by an attack: a job ten years ahead ran at once). A lone job is a chunk of one.
    jobs: list[Any] | None = None
    positional = False
    if "jobs" in kwargs:
        if not isinstance(kwargs["jobs"], list):
            kwargs["jobs"] = [kwargs["jobs"]]
        jobs = kwargs["jobs"]
    elif isinstance(args, list) and len(args) == 1 and not kwargs:
        if not isinstance(args[0], list):
            args[0] = [args[0]]
        jobs, positional = args[0], True
    rest = [[] if positional else args, embed, {k: v for k, v in kwargs.items() if k != "jobs"}]
    found = json_measure.measure(rest, max_depth=limits.depth, max_bytes=limits.job_bytes)
    if found.problem is not None:
        return f"arguments: {found.problem[1]}", 0
    if jobs is None:
        return None, 0
    refused = 0
    for index, raw in enumerate(jobs):
        problems = [*(every or []), *job_problems(raw, limits)]
        if problems:
            jobs[index] = refused_job(raw, problems)
            refused += 1
    return None, refused


def _job_ids(message: Any) -> str:
    """The ids of a message's jobs that read as text (at most 10, each at most 80
    characters), for a log line; never raises."""
    try:
        args, kwargs, _embed = message.payload
        jobs = kwargs["jobs"] if "jobs" in kwargs else args[0]
        ids = [
            job["id"][:80]
            for job in (jobs if isinstance(jobs, list) else [jobs])
            if isinstance(job, dict) and isinstance(job.get("id"), str)
        ]
    except Exception:  # whatever the message holds, the line is still written
        return "unreadable"
    return ", ".join(repr(job_id) for job_id in ids[:10]) + (" ..." if len(ids) > 10 else "")


def _poison(reason: str, task: str, detail: str, count: int = 1) -> None:
    log.warning("task.poison", reason=reason, task=task, detail=detail[:300])
    families().poison.labels(reason=reason).inc(count)


def checked_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Callable[..., Any]:
    """Celery's default strategy behind the guard (``Task.Strategy`` points here)."""
    handle = default(task, app, consumer, **kwargs)
    connection_errors = tuple(getattr(consumer, "connection_errors", ()) or ())
    limits = current_limits()
    # A job waits no longer than the deadline ceiling; the task's own retries, their backoff.
    retry_wait_s = float(getattr(task, "retry_backoff_max", 0) or 0)
    longest_wait_s = max(get_settings().deadline_ceiling_s, retry_wait_s)

    def check(message: Any) -> None:
        """Raise ``InvalidTaskError`` (or kombu's decode errors) for a message not to run;
        refuse, in its body, the jobs not to run."""
        unreadable = message.headers.get(POISON_HEADER)
        if unreadable is not None:
            _poison(poison_reason(message.headers), task.name, str(unreadable))
            raise InvalidTaskError(f"{task.name}: {unreadable}")
        try:
            message.payload  # noqa: B018 - decoded once here, cached by kombu for Celery
        except DecodeError as exc:
            _poison("undecodable", task.name, str(exc))
            raise
        except ContentDisallowed as exc:
            _poison("disallowed_content", task.name, str(exc))
            raise
        problem = malformed(message)
        if problem is None:
            headers = json_measure.measure(
                dict(message.headers), max_depth=limits.depth, max_bytes=MAX_HEADER_BYTES
            )
            if headers.problem is not None:
                _poison("oversize_headers", task.name, headers.problem[1])
                raise InvalidTaskError(f"{task.name}: headers: {headers.problem[1]}")
            disarm(message.headers)
            scheduled = unscheduled(message.headers, longest_wait_s, retry_wait_s)
            problem, refused = contain(message.payload, limits, scheduled)
            if refused:
                _poison("job_refused", task.name, f"{refused} job(s) refused", refused)
                # The pool decodes the body again: it gets the refused jobs, not the originals.
                # ASCII (escapes): a refused job may hold a lone surrogate, which JSON's
                # \ud800 decodes to and UTF-8 cannot encode (found by an attack: the encode
                # raised, Celery took it for unrecoverable, and the worker stopped).
                message.body = json.dumps(message.payload).encode("ascii")
        if problem is not None:
            _poison("malformed", task.name, problem)
            raise InvalidTaskError(f"{task.name}: {problem}")

    def task_message_handler(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **options: Any
    ) -> Any:
        try:
            check(message)
            return handle(message, body, ack, reject, callbacks, **options)
        except (InvalidTaskError, ContentDisallowed, DecodeError, *connection_errors):
            raise
        except Exception as exc:
            # Anything else out of a strategy is unrecoverable to Celery: the worker stops,
            # and the message, put back, stops the next one. One message never does (the
            # guard's own checks included: a refused job's re-encoding raised, found by an
            # attack).
            # Its jobs get no terminal message (no producer's intake record may exist to
            # publish them again): the line names them, for an operator to submit again.
            _poison(
                "unexpected_error",
                task.name,
                f"{type(exc).__name__}: {exc}; jobs dropped: {_job_ids(message)}",
            )
            raise InvalidTaskError(f"{task.name}: {type(exc).__name__}") from None

    return task_message_handler
