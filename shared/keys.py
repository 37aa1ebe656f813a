"""Every Redis key and stream name decision-worker uses, in one place.

Two rules keep a producer's names away from the product's own keys:

- **Reply streams live in their own namespace.** A job's ``reply_to`` is a *name*; its
  stream's key is ``decisions:reply:`` + name (``reply_stream``). No other key this module
  builds starts with that prefix, and neither do the broker's (the Celery queue
  ``decisions``, kombu's ``unacked``, ``unacked_index``, ``_kombu.binding.*``), so no
  ``reply_to`` can reach any of them, whatever the databases. Names starting ``decisions:``
  are reserved for the product's own streams (``REJECTED_STREAM``).
- **A key built from ids is unambiguous.** Each id is written length-prefixed
  (``7:tenantA``), so ids may hold ``:`` and still no two tuples of ids share a key: job
  ``x:7`` on stream ``tenantA`` and job ``7`` on stream ``tenantA:x`` have two markers.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "CELERY_QUEUE",
    "ESCALATION_GROUP",
    "ESCALATION_STREAM",
    "INTAKE_JOBS",
    "INTAKE_TIMES",
    "LABEL_GROUP",
    "LABEL_STREAM",
    "MAX_REPLY_NAME",
    "PREFIX",
    "REJECTED_STREAM",
    "REPLY_NAME_PATTERN",
    "REPLY_PREFIX",
    "RESERVED_REPLY_NAMES",
    "RUN_JOBS_TASK",
    "audit_log",
    "batch_audit_log",
    "batch_estimate",
    "batch_submit_rejections",
    "console_login_failures",
    "console_login_lock",
    "console_session",
    "escalation_claim",
    "escalation_marker",
    "escalation_unreadable",
    "is_reply_name",
    "published_marker",
    "rate_inflight",
    "rate_pause",
    "rate_window",
    "reply_stream",
    "reply_to_problem",
    "resolved_record",
]

PREFIX = "decisions"

#: The Celery queue the producers publish to and the workers consume.
CELERY_QUEUE = "decisions"
#: The one task a producer may name: it runs a chunk of jobs.
RUN_JOBS_TASK = "decisions.run_jobs"

#: Every reply stream's key is this prefix and the stream's name; nothing else starts so.
REPLY_PREFIX: Final = f"{PREFIX}:reply:"
#: Longest reply stream name.
MAX_REPLY_NAME: Final = 200
#: What a reply stream name looks like (also the JSON Schema's pattern for ``reply_to``).
REPLY_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9:._\-/]*$"
_REPLY_NAME = re.compile(REPLY_NAME_PATTERN)

#: The reply stream (a name, like a ``reply_to``) of rejections whose own ``reply_to`` is
#: unusable; reserved, so no job's replies land in it.
REJECTED_STREAM = f"{PREFIX}:rejected"
#: Reply stream names the product keeps for itself; a job's ``reply_to`` may not use them.
RESERVED_REPLY_NAMES: Final = frozenset({REJECTED_STREAM})

#: Every escalation is also appended here (once per job); reviewers read it through
#: ESCALATION_GROUP. A key, outside the reply namespace.
ESCALATION_STREAM = f"{PREFIX}:escalations"
ESCALATION_GROUP = "reviewers"
#: Labels (``shared.labels``): appended by a resolution, in its own Lua call; read by the
#: group LABEL_GROUP into the ledger (``worker.calibration``), then deleted.
LABEL_STREAM = f"{PREFIX}:labels"
LABEL_GROUP = "ledger"


def _ids(*parts: str) -> str:
    """Ids joined so that the split is unique: each one length-prefixed."""
    return ":".join(f"{len(part)}:{part}" for part in parts)


def is_reply_name(name: object) -> bool:
    """True if ``name`` is a well-formed reply stream name (reserved ones included)."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_REPLY_NAME
        and _REPLY_NAME.match(name) is not None
    )


def reply_to_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a job's ``reply_to`` (None: nothing)."""
    if not is_reply_name(name):
        return (
            f"a stream name: 1 to {MAX_REPLY_NAME} letters, digits and : . _ - /, "
            "starting with a letter or digit"
        )
    assert isinstance(name, str)
    if name in RESERVED_REPLY_NAMES:
        return f"{name!r} is reserved for decision-worker's own replies"
    return None


def reply_stream(name: str) -> str:
    """The key of the reply stream named ``name`` (a job's ``reply_to``); ``ValueError`` for a
    name that is not one, so no caller can build a key outside the namespace."""
    if not is_reply_name(name):
        raise ValueError(f"{name[:80]!r} is not a reply stream name")
    return REPLY_PREFIX + name


def published_marker(stream: str, job_id: str, *, marker: str | None = None) -> str:
    """Set, in the same Lua call as the XADD, once a job's terminal message is on ``stream``
    (its value: that entry's id). ``marker`` replaces the job id as what was published once
    (a rejection's body digest), in a part of its own so it never equals a job id's key."""
    if marker is None:
        return f"{PREFIX}:published:{_ids(stream, 'job', job_id)}"
    return f"{PREFIX}:published:{_ids(stream, 'marker', marker)}"


def escalation_marker(job_id: str) -> str:
    """Set once a job's escalation is on the escalation stream, whatever its reply stream
    (its value: that entry's id; it lives as long as a publish marker)."""
    return f"{PREFIX}:escalated:{_ids(job_id)}"


def resolved_record(job_id: str) -> str:
    """A job's resolution (a hash: reviewer, resolved_at_ms by Redis's clock, entry_id,
    reply_entry_id), written once and kept for good: a second resolution is refused."""
    return f"{PREFIX}:resolved:{_ids(job_id)}"


def escalation_claim(escalation_id: str) -> str:
    """Which reviewer holds an escalation, with a TTL (a vanished reviewer lets go)."""
    return f"{PREFIX}:escalation-claim:{_ids(escalation_id)}"


def escalation_unreadable(stream: str) -> str:
    """Sorted set of the entries of the escalation stream ``stream`` that a reader found no
    reviewer could answer (their ids, scored by their milliseconds), so that the gauges tell
    them from the waiting ones without reading every body (``shared.escalation_unreadable``)."""
    return f"{PREFIX}:escalation-unreadable:{_ids(stream)}"


def rate_inflight(provider: str) -> str:
    """Sorted set of in-flight request tokens for a provider, scored by their expiry."""
    return f"{PREFIX}:limits:inflight:{_ids(provider)}"


def rate_pause(provider: str) -> str:
    """Until when (ms since the epoch, Redis time) a provider's Retry-After pauses the fleet."""
    return f"{PREFIX}:limits:pause:{_ids(provider)}"


def rate_window(provider: str) -> str:
    """A provider's rate: the theoretical time of its next send (GCRA, ms, Redis time)."""
    return f"{PREFIX}:limits:window:{_ids(provider)}"


def batch_estimate(batch: str) -> str:
    """A batch's cost estimate (``shared.estimate.Estimate`` as JSON), stored at submit."""
    return f"{PREFIX}:estimate:{_ids(batch)}"


def batch_submit_rejections(batch: str) -> str:
    """A batch's lines the producer's ``Client`` rejected before queueing them (a set of
    their rejection markers, so a line submitted twice counts once): they never reach the
    ledger, and ``shared.submit_rejections`` counts them beside it."""
    return f"{PREFIX}:submit-rejected:{_ids(batch)}"


# --- the reviewer console (worker.console) ---------------------------------------------------


def console_session(session_hash: str) -> str:
    """A console login's server-side session, by the SHA-256 of its cookie (never the cookie)."""
    return f"{PREFIX}:console:session:{session_hash}"


def console_login_failures(subject: str) -> str:
    """Failed logins of one account or client address (``subject`` is a hash), with a TTL."""
    return f"{PREFIX}:console:login-failures:{subject}"


def console_login_lock(subject: str) -> str:
    """Set while an account or address must wait before its next login attempt."""
    return f"{PREFIX}:console:login-lock:{subject}"


def audit_log() -> str:
    """Stream of every claim, release and resolution of an escalation (console or CLI)."""
    return f"{PREFIX}:audit"


def batch_audit_log(batch: str) -> str:
    """The same audit entries, of one batch only (what the batch page shows)."""
    return f"{PREFIX}:audit-batch:{_ids(batch)}"


#: Intake records (``shared.intake``): every job queued and not yet taken by a worker, by
#: (reply stream, job id) as a JSON pair: its JSON and its message's task id (a hash) ...
INTAKE_JOBS = f"{PREFIX}:intake:jobs"
#: ... and its submit time, Redis ``TIME`` in seconds (a sorted set, oldest first).
INTAKE_TIMES = f"{PREFIX}:intake:times"
