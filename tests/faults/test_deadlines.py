"""Deadlines on a real worker: late jobs send nothing, requests end at the nearer of the job's
deadline and the provider's timeout, and a visibility timeout too close to the deadline
ceiling keeps the worker from starting at all."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared import keys
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import profile
from tests.support.processes import DECISIONS

pytestmark = pytest.mark.faults


def test_a_job_dequeued_after_its_deadline_sends_nothing(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("late")
    now = datetime.now(UTC)
    # Submitted 10 s ago with 2 s to live (a backlog), and one whose absolute deadline passed
    # in transit (put on the queue raw: the client refuses a past deadline at submit time).
    ten_s_ago = (now - timedelta(seconds=10)).isoformat()
    backlog = crew.jobs(3, "backlog", timeout_s=2, submitted_at=ten_s_ago)
    expired = crew.jobs(1, "expired")[0] | {
        "reply_to": crew.stream, "deadline": (now - timedelta(seconds=1)).isoformat()
    }
    on_time = crew.jobs(2, "on-time")
    crew.start_worker()
    submitted = crew.submit([*backlog, *on_time])
    crew.client().celery.send_task(
        keys.RUN_JOBS_TASK, kwargs={"jobs": [expired]}, queue=keys.CELERY_QUEUE
    )
    pairs = crew.pairs([*submitted.job_ids, expired["id"]])
    crew.expect_replies(pairs, timeout_s=30)
    figures = report(crew.check(pairs, reap=False))
    for job in [*backlog, expired]:
        assert figures.outcomes[job["id"]] == "escalation:deadline_exceeded"
        assert figures.requests_by_job[job["id"]] == 0
        assert figures.call_states[job["id"]] == []
    assert all(figures.outcomes[j["id"]] == "result" for j in on_time)


def _receipt(crew_entries: list[object], job_id: str) -> dict[str, object]:
    for entry in crew_entries:
        message = json.loads(entry.message)  # type: ignore[attr-defined]
        if message["job_id"] == job_id:
            return dict(message["receipts"][0])
    raise AssertionError(f"no message for {job_id}")


def test_the_job_deadline_cuts_a_slow_request_short_of_the_provider_timeout(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    # Provider timeout 30 s, job deadline 2 s, the faux answers after 20 s.
    crew = new_fleet("deadline-cuts", profile(3, provider_timeout_s="30"))
    [job] = crew.jobs(1, timeout_s=2)
    crew.slow(20_000, [job["id"]])
    crew.start_worker()
    submitted_at = datetime.now(UTC)
    crew.submit([job])
    pairs = crew.pairs([job["id"]])
    crew.expect_replies(pairs, timeout_s=25)
    figures = report(crew.check(pairs, reap=False))
    assert figures.outcomes[job["id"]] == "escalation:decision_interrupted"
    assert figures.call_states[job["id"]] == ["unknown"]  # it was in flight: never again
    assert figures.requests_by_job[job["id"]] == 1
    receipt = _receipt(crew.entries(), job["id"])
    assert receipt["error_code"] == "outcome_unknown"
    ended = datetime.fromisoformat(str(receipt["finished_at"]))
    # It ended at the job's deadline, not at the provider's 30 s.
    deadline = submitted_at + timedelta(seconds=2)
    assert deadline - timedelta(seconds=0.5) <= ended < deadline + timedelta(seconds=10)


def test_the_provider_timeout_cuts_a_request_short_of_the_job_deadline(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    # Provider timeout 1 s, job deadline 3 s: the faux's answer at 2.5 s would be in time
    # for the job, so an answered call here would mean the provider timeout was ignored.
    crew = new_fleet("provider-cuts", profile(3, provider_timeout_s="1"))
    [job] = crew.jobs(1, timeout_s=3)
    crew.slow(2500, [job["id"]])
    crew.start_worker()
    crew.submit([job])
    pairs = crew.pairs([job["id"]])
    crew.expect_replies(pairs, timeout_s=25)
    figures = report(crew.check(pairs, reap=False))
    assert figures.outcomes[job["id"]] == "escalation:decision_interrupted"
    assert figures.call_states[job["id"]] == ["unknown"]
    receipt = _receipt(crew.entries(), job["id"])
    assert receipt["error_code"] == "outcome_unknown"


@pytest.mark.parametrize("command", ["decisions", "celery"])
def test_the_worker_refuses_a_visibility_timeout_too_close_to_the_ceiling(
    new_fleet: FleetFactory, command: str
) -> None:
    crew = new_fleet(f"refuse-{command}")
    # Ceiling 900 s: the hard task limit is 1020 s, so 1800 s is not "well above" it.
    env = crew.env(**profile(900, margin_s=30, slack_s=60, visibility_timeout_s="1800"))
    argv = (
        [DECISIONS, "worker"]
        if command == "decisions"
        else [str(Path(DECISIONS).with_name("celery")), "-A", "worker.app", "worker"]
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    out = " ".join((done.stdout + done.stderr).split())  # rich wraps long lines
    assert done.returncode == 2, out
    assert "DECISIONS_VISIBILITY_TIMEOUT_S=1800 is not well above the deadline ceiling" in out
    assert "at least 2040 s" in out
    assert "ready." not in out
