"""After a fault scenario: compare what the provider received, what the ledger holds and what
the reply streams carry, job by job, and return the figures.

The promise being checked, per (job id, reply stream) a producer submitted:

- every call the faux server received has a committed ledger claim (nothing is sent without
  one), and no call was received more than once unless the ledger proves it was never sent
  (``not_sent``);
- exactly one terminal message reaches the producer: raw duplicates on the stream are
  tolerated only if they carry the same message and ``Client.replies`` drops them; the message
  is the one the ledger stored (first written wins);
- a call whose outcome is unknown escalates its job ``decision_interrupted`` (and was never
  asked again); a ``deadline_exceeded``, ``budget_exhausted`` or ``rejected`` job sent
  nothing;
- every escalation reaches the escalation stream once;
- no job is lost: each has its terminal message, if need be after the reaper ran. That
  includes a job whose message kombu's Redis transport lost (popped by a consumer killed
  before it recorded the message unacknowledged, celery/celery#4354, kombu#305): the
  product recovers it itself (the producer recorded its intake, a worker's reaper
  republishes it, ``worker.recovery.intake``); nothing here resubmits anything.

``check`` raises ``AssertionError`` listing every broken promise, else returns ``Figures``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx
import redis

from shared import keys
from shared.client import Client
from shared.settings import Settings
from shared.streams import StreamEntry, read_entries, read_stream
from worker.ledger import CallRow, JobRow, Ledger

__all__ = ["Figures", "JobView", "check", "faux_calls"]

TERMINAL = frozenset({"result", "escalation", "rejected"})


@dataclass
class Figures:
    """What a scenario came to; ``duplicates`` and ``lost`` must be 0 for it to pass."""

    jobs: int = 0
    requests: int = 0
    duplicates: int = 0
    lost: int = 0
    results: int = 0
    rejected: int = 0
    escalated: dict[str, int] = field(default_factory=dict)
    unknown_calls: int = 0
    reaped: int = 0
    #: Jobs the workers' reapers republished because the broker had lost their message.
    broker_lost: int = 0
    escalation_duplicates: int = 0
    #: Per job id: its terminal outcome (``result``, ``escalation:<reason>``, ``rejected``,
    #: ``lost``), the requests the faux received for it, and its calls' ledger states.
    outcomes: dict[str, str] = field(default_factory=dict, repr=False)
    requests_by_job: dict[str, int] = field(default_factory=dict, repr=False)
    call_states: dict[str, list[str]] = field(default_factory=dict, repr=False)
    broker_lost_ids: list[str] = field(default_factory=list, repr=False)

    def line(self) -> str:
        escalated = ", ".join(f"{k}: {v}" for k, v in sorted(self.escalated.items())) or "none"
        return (
            f"jobs={self.jobs} requests={self.requests} duplicates={self.duplicates} "
            f"lost={self.lost} results={self.results} rejected={self.rejected} "
            f"escalated={{{escalated}}} unknown_calls={self.unknown_calls} "
            f"reaped={self.reaped} broker_lost={self.broker_lost}"
        )


@dataclass
class JobView:
    """Everything the checker saw of one job on one stream."""

    job_id: str
    stream: str
    requests: dict[str, int]
    calls: dict[str, CallRow]
    row: JobRow | None
    entries: list[StreamEntry]
    escalation_entries: int

    @property
    def terminal(self) -> dict[str, object] | None:
        return json.loads(self.entries[0].message) if self.entries else None


def faux_calls(faux_url: str) -> dict[str, int]:
    """The faux server's request counts by ``X-Decisions-Call`` (``<job id>/<step>``)."""
    return dict(httpx.get(f"{faux_url}/_faux/calls", timeout=10).json())


def _requests_by_job(counts: dict[str, int]) -> dict[str, dict[str, int]]:
    by_job: dict[str, dict[str, int]] = defaultdict(dict)
    for key, count in counts.items():
        job_id, _, step = key.rpartition("/")
        by_job[job_id][step] = count
    return by_job


def _terminal_entries(
    r: redis.Redis, streams: Iterable[str]
) -> dict[tuple[str, str], list[StreamEntry]]:
    found: dict[tuple[str, str], list[StreamEntry]] = defaultdict(list)
    for stream in streams:
        for entry in read_stream(r, stream):
            if entry.type in TERMINAL:
                found[(entry.job_id, stream)].append(entry)
    return found


def _escalation_entries(r: redis.Redis, stream: str) -> Counter[str]:
    """Escalation stream entries per job: one a job, whatever stream(s) it replied to."""
    counts: Counter[str] = Counter()
    for entry in read_entries(r, stream):
        counts[entry.job_id] += 1
    return counts


def _deduplicated(r: redis.Redis, streams: Iterable[str]) -> Counter[tuple[str, str]]:
    """What a producer's ``Client.replies`` yields: one per job unless the messages differ."""
    client = Client(Settings(), redis_client=r)
    counts: Counter[tuple[str, str]] = Counter()
    for stream in streams:
        for reply in client.replies(stream):
            counts[(reply.job_id, stream)] += 1
    return counts


def _views(
    pairs: list[tuple[str, str]],
    *,
    r: redis.Redis,
    faux_url: str,
    ledger: Ledger,
    escalation_stream: str,
) -> list[JobView]:
    streams = sorted({s for _, s in pairs})
    requests = _requests_by_job(faux_calls(faux_url))
    entries = _terminal_entries(r, streams)
    escalations = _escalation_entries(r, escalation_stream)
    views = []
    for job_id, stream in pairs:
        calls = {c.step: c for c in ledger.calls(job_id)}
        received = dict(requests.get(job_id, {}))
        for step, call in calls.items():
            # A packed request is keyed by its pack (``pack:<id>/<step>``): each member's.
            shared = requests.get(f"pack:{call.pack_id}", {}).get(step) if call.pack_id else None
            if shared:
                received[step] = received.get(step, 0) + shared
        views.append(
            JobView(
                job_id=job_id,
                stream=stream,
                requests=received,
                calls=calls,
                row=ledger.get_job(job_id),
                entries=entries.get((job_id, stream), []),
                escalation_entries=escalations[job_id],
            )
        )
    return views


def _problems(view: JobView, deduplicated: int) -> list[str]:
    """Every promise this job's evidence breaks."""
    problems: list[str] = []
    who = f"{view.job_id} on {view.stream}"
    for step, count in view.requests.items():
        call = view.calls.get(step)
        if call is None:
            problems.append(f"{who}: {step} received {count}x with no committed claim")
        elif count > 1 and call.status != "not_sent":
            problems.append(f"{who}: {step} received {count}x (ledger: {call.status})")
    for step, call in view.calls.items():
        if call.status == "claimed":
            problems.append(f"{who}: {step} still claimed (lease {call.lease_expires})")
    if not view.entries:
        problems.append(f"{who}: no terminal message (lost)")
        return problems
    if len({e.message for e in view.entries}) > 1:
        kinds = [e.type for e in view.entries]
        problems.append(f"{who}: {len(view.entries)} different terminal messages {kinds}")
    if deduplicated != 1:
        problems.append(f"{who}: Client.replies yields {deduplicated} terminal messages")
    message = view.terminal
    assert message is not None
    kind, reason = message["type"], message.get("reason")
    sent = sum(view.requests.values())
    if kind != "rejected":
        if view.row is None or view.row.terminal_message is None:
            problems.append(f"{who}: {kind} on the stream, none stored in the ledger")
        elif json.loads(view.row.terminal_message) != message:
            problems.append(f"{who}: the stream's message is not the ledger's")
    sent_calls = any(c.status != "not_sent" for c in view.calls.values())
    # A conflicting resubmission (same id, other content) is rejected naming ``id``; the
    # calls under that id belong to the submission that came first.
    conflict = kind == "rejected" and [p["field"] for p in message["problems"]] == ["id"]
    nothing_sent = (kind == "rejected" and not conflict) or reason in (
        "deadline_exceeded",
        "budget_exhausted",
    )
    if nothing_sent and (sent or sent_calls):
        problems.append(f"{who}: {reason or kind}, yet {sent} request(s) were received")
    for step, call in view.calls.items():
        if call.status == "unknown" and (kind, reason) != ("escalation", "decision_interrupted"):
            problems.append(f"{who}: {step} unknown but the job ended {kind}/{reason}")
    if kind == "escalation" and view.escalation_entries < 1:
        problems.append(f"{who}: escalated, but not on the escalation stream")
    if view.escalation_entries > (1 if kind == "escalation" else 0):
        problems.append(f"{who}: {view.escalation_entries} entries on the escalation stream")
    if kind == "result" and not any(c.status == "answered" for c in view.calls.values()):
        problems.append(f"{who}: a result without an answered call")
    return problems


def check(
    pairs: Iterable[tuple[str, str]],
    *,
    r: redis.Redis,
    faux_url: str,
    ledger_url: str,
    reap: Callable[[], object] | None = None,
    escalation_stream: str = keys.ESCALATION_STREAM,
) -> Figures:
    """Check every (job id, reply stream) pair.

    If a job has no message, ``reap`` runs once (``decisions ledger reap``, the product's own
    command); nothing is ever resubmitted.
    """
    wanted = list(dict.fromkeys(pairs))
    ledger = Ledger(ledger_url)

    def look() -> list[JobView]:
        return _views(
            wanted, r=r, faux_url=faux_url, ledger=ledger, escalation_stream=escalation_stream
        )

    try:
        views = look()
        missing = [v for v in views if not v.entries]
        reaped = 0
        if missing and reap is not None:
            reap()
            views = look()
            reaped = len(missing) - sum(1 for v in views if not v.entries)
    finally:
        ledger.dispose()
    deduplicated = _deduplicated(r, sorted({s for _, s in wanted}))
    figures = Figures(jobs=len(wanted), reaped=reaped)
    problems: list[str] = []
    escalated: Counter[str] = Counter()
    counted_packs: set[str] = set()
    escalation_counted: set[str] = set()
    for view in views:
        problems.extend(_problems(view, deduplicated[(view.job_id, view.stream)]))
        if view.job_id not in figures.requests_by_job:  # a job on two streams sent once
            for step, count in view.requests.items():
                pack = view.calls[step].pack_id if step in view.calls else None
                if pack is None or pack not in counted_packs:  # a packed request once
                    figures.requests += count
                if pack is not None:
                    counted_packs.add(pack)
        figures.requests_by_job[view.job_id] = sum(view.requests.values())
        figures.call_states[view.job_id] = [c.status for c in view.calls.values()]
        figures.unknown_calls += sum(1 for c in view.calls.values() if c.status == "unknown")
        if not view.entries:
            figures.lost += 1
            figures.outcomes[view.job_id] = "lost"
            continue
        figures.duplicates += len(view.entries) - 1
        message = view.terminal
        assert message is not None
        reason = message.get("reason")
        figures.outcomes[view.job_id] = f"{message['type']}:{reason}" if reason else message["type"]
        if message["type"] == "result":
            figures.results += 1
        elif message["type"] == "rejected":
            figures.rejected += 1
        else:
            escalated[str(message.get("reason"))] += 1
            if view.job_id not in escalation_counted:  # one count a job, however many streams
                escalation_counted.add(view.job_id)
                figures.escalation_duplicates += max(0, view.escalation_entries - 1)
    figures.escalated = dict(escalated)
    if problems:
        shown = "\n  ".join(problems[:30])
        more = f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else ""
        headline = f"{len(problems)} broken promise(s); {figures.line()}"
        raise AssertionError(f"{headline}\n  {shown}{more}")
    return figures
