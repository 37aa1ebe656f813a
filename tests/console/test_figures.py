"""The batches page's figures, read from a real (SQLite) ledger filled by its own API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from worker.console.chart import progress_chart
from worker.console.figures import batch_report, list_batches
from worker.ledger import CallOutcome, Ledger

#: provider, status, cost, basis
Call = tuple[str, str, float | None, str | None]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: float) -> None:
        self.now = T0 + timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(tmp_path: Path, clock: Clock) -> Iterator[Ledger]:
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as ledger:
        ledger.migrate()
        yield ledger


def job(
    ledger: Ledger,
    clock: Clock,
    job_id: str,
    *,
    batch: str = "b1",
    start: float,
    end: float | None,
    outcome: tuple[str, str | None] = ("result", None),
    call: Call | None = ("faux", "answered", 0.002, "reported"),
) -> None:
    clock.at(start)
    ledger.open_job(
        job_id=job_id,
        kind="decide",
        batch=batch,
        reply_to="r",
        fingerprint=job_id,
        deadline=T0 + timedelta(hours=1),
        job_json="{}",
    )
    if call is not None:
        provider, status, cost, basis = call
        ledger.claim(
            job_id=job_id,
            step="decide",
            provider=provider,
            model=None,
            request_sha256=None,
            lease_expires=T0 + timedelta(hours=1),
        )
        if end is not None:
            clock.at(end)
        ledger.record(
            job_id=job_id,
            outcome=CallOutcome(step="decide", status=status, cost_usd=cost, cost_basis=basis),  # type: ignore[arg-type]
        )
    if end is not None:
        clock.at(end)
        ledger.finish_job(
            job_id=job_id, message_type=outcome[0], reason=outcome[1], message_json="{}"
        )


def test_a_batch_report_counts_costs_and_finds_the_stragglers(ledger: Ledger, clock: Clock) -> None:
    job(ledger, clock, "fast", start=0, end=2)
    job(ledger, clock, "slow", start=0, end=50, outcome=("escalation", "low_confidence"))
    job(
        ledger,
        clock,
        "lost",
        start=10,
        end=30,
        outcome=("escalation", "decision_interrupted"),
        call=("parallel", "unknown", 0.001, "estimate"),
    )
    job(
        ledger,
        clock,
        "nocost",
        start=10,
        end=20,
        call=("openrouter", "answered", None, None),
    )
    job(ledger, clock, "stuck", start=5, end=None, call=None)
    job(ledger, clock, "other-batch", batch="b2", start=0, end=1)
    job(
        ledger,
        clock,
        "other-lost",
        batch="b2",
        start=0,
        end=1,
        call=("parallel", "unknown", 0.001, "estimate"),
    )

    report = batch_report(ledger, "b1", T0 + timedelta(seconds=60))

    assert report.status.jobs_total == 5 and report.status.jobs_open == 1
    assert [(c.provider, c.basis, c.calls, c.cost_usd) for c in report.costs] == [
        ("faux", "reported", 2, pytest.approx(0.004)),
        ("openrouter", "unknown", 1, None),
        ("parallel", "estimate", 1, pytest.approx(0.001)),
    ]
    assert report.cost_known_usd == pytest.approx(0.005)
    # Unknown calls of this batch only.
    assert [c.job_id for c in report.unknown_calls] == ["lost"]
    assert [(t.job_id, t.seconds) for t in report.slowest] == [
        ("slow", 50.0),
        ("lost", 20.0),
        ("nocost", 10.0),
        ("fast", 2.0),
    ]
    assert [(t.job_id, t.seconds) for t in report.oldest_open] == [("stuck", 55.0)]

    # The timeline runs from the first submission to now (a job is still open).
    points = report.timeline
    assert points[0].at == T0 and points[-1].at == T0 + timedelta(seconds=60)
    assert [p.submitted for p in points][:1] == [2] and points[-1].submitted == 5
    assert points[-1].by_type == {"result": 2, "escalation": 2}
    finished = [p.finished for p in points]
    assert finished == sorted(finished)
    assert sum(sum(p.reasons.values()) for p in points) == 4
    assert sum(p.reasons.get("escalation:low_confidence", 0) for p in points) == 1


def test_the_batch_list_has_every_batch_with_its_outcomes(ledger: Ledger, clock: Clock) -> None:
    job(ledger, clock, "a1", batch="early", start=0, end=5)
    job(ledger, clock, "b1", batch="late", start=100, end=None, call=None)
    job(ledger, clock, "b2", batch="late", start=101, end=110, outcome=("rejected", None))
    listed = list_batches(ledger)
    assert [(b.batch, b.jobs, b.open, b.by_type) for b in listed] == [
        ("late", 2, 1, {"rejected": 1}),
        ("early", 1, 0, {"result": 1}),
    ]
    assert listed[0].first_created == T0 + timedelta(seconds=100)
    assert listed[1].last_finished == T0 + timedelta(seconds=5)


def test_the_chart_draws_cumulative_lines_inside_its_plot(ledger: Ledger, clock: Clock) -> None:
    for i in range(6):
        job(ledger, clock, f"j{i}", start=0, end=10 * (i + 1))
    job(ledger, clock, "e", start=0, end=30, outcome=("escalation", "decision_refused"))
    chart = progress_chart(batch_report(ledger, "b1", T0 + timedelta(seconds=70)).timeline)
    labels = {s.label: s for s in chart.series}
    assert set(labels) == {"submitted", "finished", "answered", "escalated"}
    assert labels["answered"].last == 6 and labels["escalated"].last == 1
    left, top, right, bottom = chart.plot
    for series in chart.series:
        xs_ys = [tuple(map(float, p.split(","))) for p in series.points.split()]
        assert all(left <= x <= right and top <= y <= bottom for x, y in xs_ys)
        ys = [y for _, y in xs_ys]
        assert ys == sorted(ys, reverse=True)  # cumulative: never goes down (SVG y grows down)
    assert progress_chart([]).empty


def test_the_timeline_ends_at_the_totals_however_the_span_divides() -> None:
    """A span that 12 does not divide in microseconds used to end the last point short of
    the last finished job (238/204 of 240/206 in the chart and the "over time" table)."""
    from worker.console.figures import JobTiming, timeline

    start = T0
    timings = [
        JobTiming(
            f"j{i}", start, start + timedelta(microseconds=1_000_007 * (i + 1)), "result", None, 0.0
        )
        for i in range(5)
    ]
    points = timeline(timings, now=start + timedelta(hours=1))
    assert points[-1].submitted == 5
    assert points[-1].by_type == {"result": 5}
    assert points[-1].at == max(t.finished_at for t in timings if t.finished_at)
