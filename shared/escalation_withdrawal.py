"""Withdrawing the escalations of jobs that run again (``decisions budget resume``).

A job that escalated ``budget_exhausted`` and is resumed runs again and gets a new terminal
message. Its first escalation must leave the reviewers' queue before it runs: resolved after
that, it would publish a resolution for a job that also gets the resumed run's result, and
the producer would act on both. Its escalation marker must go too, or the resumed run's own
escalation (if it escalates again) would never enter the queue: the stream takes one entry
a job while that marker lives (``shared.streams``).

One Lua call a job, so that a reviewer's resolve (``shared.escalations``, also one Lua call)
comes wholly before or wholly after it: unless the job's resolved record exists (a reviewer
answered it: the job is left alone, as it was), each of its entries is acknowledged and
deleted from the escalation stream, and its marker deleted. Entries are found by reading the
stream: the marker expires with the publish markers, the entry does not. ``decisions budget
resume`` is an operator's command, so a read of the whole stream is its price.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import redis

from shared import keys

__all__ = ["Withdrawal", "withdraw_escalations"]

log = logging.getLogger(__name__)

#: Entries read a round trip while looking for the jobs' entries.
_PAGE: Final = 1000

# KEYS: 1 escalation stream, 2 the job's escalation marker, 3 its resolved record.
# ARGV: 1 the reviewers' group, 2... the job's entry ids.
_WITHDRAW = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
for i = 2, #ARGV do
  redis.pcall('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.pcall('XDEL', KEYS[1], ARGV[i])
end
redis.call('DEL', KEYS[2])
return 1
"""


@dataclass
class Withdrawal:
    #: Jobs whose escalations left the queue (or never entered it): they may run again.
    withdrawn: set[str] = field(default_factory=set)
    #: Jobs a reviewer resolved: left alone, never run again.
    resolved: set[str] = field(default_factory=set)


def withdraw_escalations(
    client: redis.Redis,
    job_ids: Iterable[str],
    *,
    stream: str = keys.ESCALATION_STREAM,
    group: str = keys.ESCALATION_GROUP,
) -> Withdrawal:
    """Take the escalations of ``job_ids`` out of the reviewers' queue, except those of jobs
    already resolved; what became of each job."""
    wanted = set(job_ids)
    entries: dict[str, list[str]] = {job_id: [] for job_id in wanted}
    for entry_id, job_id in _entries(client, stream):
        if job_id in entries:
            entries[job_id].append(entry_id)
    script: Any = client.register_script(_WITHDRAW)
    done = Withdrawal()
    for job_id in sorted(wanted):
        ids = entries[job_id]
        keys_ = [stream, keys.escalation_marker(job_id), keys.resolved_record(job_id)]
        if int(script(keys=keys_, args=[group, *ids])):
            done.withdrawn.add(job_id)
            if ids:
                log.info("escalation.withdrawn job_id=%s entries=%s", job_id, ",".join(ids))
        else:
            done.resolved.add(job_id)
    return done


def _entries(client: redis.Redis, stream: str) -> Iterable[tuple[str, str]]:
    """(entry id, job id) of every entry of ``stream``, oldest first, a page at a time."""
    start = "-"
    while True:
        try:
            page: Any = client.xrange(stream, min=start, max="+", count=_PAGE)
        except redis.ResponseError:
            return  # not a stream (nothing was ever escalated, or not ours): nothing to take
        for raw_id, fields in page:
            entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            job_id = fields.get(b"job_id", fields.get("job_id"))
            if isinstance(job_id, bytes):
                job_id = job_id.decode("utf-8", "replace")
            if isinstance(job_id, str):
                yield entry_id, job_id
        if len(page) < _PAGE:
            return
        start = f"({entry_id}"
