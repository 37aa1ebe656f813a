"""What the batches page shows, read from the ledger (read-only transactions).

Counts by outcome and reason come from ``Ledger.status``, unknown calls from
``Ledger.unknown_calls``, the batches, each job's timing and cost by provider and basis
from the ledger's read API (``worker.ledger.reads``); nothing here knows its tables.
The timeline is built in Python from each job's created/finished stamps (two columns a job),
which keeps the query the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from worker.ledger import CallRow, Ledger, LedgerStatus
from worker.ledger.reads import batch_detail, batch_rows

__all__ = [
    "BatchReport",
    "BatchSummary",
    "CostLine",
    "JobTiming",
    "TimelinePoint",
    "batch_report",
    "list_batches",
    "timeline",
]

SLOWEST = 10
TIMELINE_POINTS = 12


@dataclass(frozen=True)
class BatchSummary:
    batch: str | None
    jobs: int
    open: int
    by_type: dict[str, int]
    first_created: datetime | None
    last_finished: datetime | None


@dataclass(frozen=True)
class JobTiming:
    job_id: str
    created_at: datetime
    finished_at: datetime | None
    terminal_type: str | None
    terminal_reason: str | None
    seconds: float

    @property
    def outcome(self) -> str:
        if self.terminal_type is None:
            return "open"
        if self.terminal_reason:
            return f"{self.terminal_type}:{self.terminal_reason}"
        return self.terminal_type


@dataclass(frozen=True)
class CostLine:
    provider: str
    basis: str
    calls: int
    #: None: none of these calls has a known cost (never reported as 0).
    cost_usd: float | None


@dataclass(frozen=True)
class TimelinePoint:
    """Cumulative counts at ``at``; ``reasons`` counts what finished since the last point."""

    at: datetime
    submitted: int
    by_type: dict[str, int]
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return sum(self.by_type.values())


@dataclass(frozen=True)
class BatchReport:
    batch: str
    status: LedgerStatus
    costs: list[CostLine]
    unknown_calls: list[CallRow]
    slowest: list[JobTiming]
    oldest_open: list[JobTiming]
    timeline: list[TimelinePoint]
    now: datetime

    @property
    def timeline_changes(self) -> list[TimelinePoint]:
        """The timeline's points where a count moved (and the first and the last)."""
        kept: list[TimelinePoint] = []
        for i, point in enumerate(self.timeline):
            last = i == len(self.timeline) - 1
            moved = not kept or (point.submitted, point.by_type) != (
                kept[-1].submitted,
                kept[-1].by_type,
            )
            if moved or last:
                kept.append(point)
        return kept

    def reasons_of(self, terminal_type: str) -> list[tuple[str, int]]:
        """``[(reason, jobs)]`` of one outcome (``escalation``: low_confidence, ...)."""
        prefix = f"{terminal_type}:"
        return sorted(
            (key.removeprefix(prefix), count)
            for key, count in self.status.jobs_by_reason.items()
            if key.startswith(prefix)
        )

    @property
    def cost_known_usd(self) -> float:
        return sum(c.cost_usd for c in self.costs if c.cost_usd is not None)


def list_batches(ledger: Ledger) -> list[BatchSummary]:
    """Every batch in the ledger (jobs without one as batch None), newest first."""
    totals: dict[str | None, Counter[str]] = {}
    first: dict[str | None, datetime] = {}
    last: dict[str | None, datetime] = {}
    rows = batch_rows(ledger)
    for batch, terminal_type, count, created, finished in rows:
        totals.setdefault(batch, Counter())[terminal_type or "open"] += count
        created, finished = _aware(created), _aware(finished)
        if created is not None and (batch not in first or created < first[batch]):
            first[batch] = created
        if finished is not None and (batch not in last or finished > last[batch]):
            last[batch] = finished
    summaries = [
        BatchSummary(
            batch=batch,
            jobs=sum(counts.values()),
            open=counts.get("open", 0),
            by_type={k: v for k, v in counts.items() if k != "open"},
            first_created=first.get(batch),
            last_finished=last.get(batch),
        )
        for batch, counts in totals.items()
    ]
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(summaries, key=lambda s: s.first_created or epoch, reverse=True)


def batch_report(ledger: Ledger, batch: str, now: datetime) -> BatchReport:
    status = ledger.status(batch)
    detail = batch_detail(ledger, batch)
    timings = [
        _timing(job_id, created, finished, ttype, reason, now)
        for job_id, created, finished, ttype, reason in detail.jobs
    ]
    costs = [
        CostLine(
            provider=provider,
            basis=basis or "unknown",
            calls=count,
            cost_usd=float(total) if costed else None,
        )
        for provider, basis, count, total, costed in detail.costs
    ]
    in_batch = {t.job_id for t in timings}
    unknown = [c for c in ledger.unknown_calls() if c.job_id in in_batch]
    finished = [t for t in timings if t.finished_at is not None]
    still_open = [t for t in timings if t.finished_at is None]
    return BatchReport(
        batch=batch,
        status=status,
        costs=sorted(costs, key=lambda c: (c.provider, c.basis)),
        unknown_calls=unknown,
        slowest=sorted(finished, key=lambda t: t.seconds, reverse=True)[:SLOWEST],
        oldest_open=sorted(still_open, key=lambda t: t.seconds, reverse=True)[:SLOWEST],
        timeline=timeline(timings, now),
        now=now,
    )


def timeline(
    timings: list[JobTiming], now: datetime, points: int = TIMELINE_POINTS
) -> list[TimelinePoint]:
    """Cumulative submitted and finished-by-type counts at evenly spaced moments."""
    if not timings:
        return []
    start = min(t.created_at for t in timings)
    stamps = [t.finished_at for t in timings if t.finished_at is not None]
    end = now if any(t.finished_at is None for t in timings) or not stamps else max(stamps)
    end = max(end, start + timedelta(seconds=1))
    step = (end - start) / points
    out: list[TimelinePoint] = []
    previous = start
    for i in range(points + 1):
        # The last point is the end itself: ``step`` is rounded down to a microsecond, and
        # ``start + step * points`` fell short of the last finished job (238 of 240 shown).
        at = end if i == points else start + step * i
        by_type: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        for t in timings:
            if t.finished_at is None or t.finished_at > at or t.terminal_type is None:
                continue
            by_type[t.terminal_type] += 1
            if i == 0 or t.finished_at > previous:
                reasons[t.outcome] += 1
        submitted = sum(1 for t in timings if t.created_at <= at)
        out.append(TimelinePoint(at, submitted, dict(by_type), dict(reasons)))
        previous = at
    return out


def _timing(
    job_id: str,
    created: datetime,
    finished: datetime | None,
    terminal_type: str | None,
    reason: str | None,
    now: datetime,
) -> JobTiming:
    created_at = _aware(created)
    finished_at = _aware(finished)
    assert created_at is not None
    seconds = ((finished_at or now) - created_at).total_seconds()
    return JobTiming(job_id, created_at, finished_at, terminal_type, reason, seconds)


def _aware(value: datetime | None) -> datetime | None:
    # The aggregate functions (min/max) bypass the column type on SQLite and return text.
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
