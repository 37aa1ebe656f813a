"""After a worker was killed with a request in flight, as an operator and a reviewer would:
the ledger's figures reconcile with what the provider received, the unknown call is listed,
and its escalation is claimed, checked, resolved, and read back from the reply stream, all
through the ``decisions`` command line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from shared.replies import ResolutionMessage
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import Fleet, profile
from tests.support.processes import DECISIONS

pytestmark = pytest.mark.faults


def cli(crew: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DECISIONS, *args],
        env={**crew.env(), "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_interrupted_call_is_reconciled_claimed_and_resolved(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("aftermath", profile(10, worker_concurrency="1"))
    jobs = crew.jobs(4)
    target = jobs[0]["id"]
    crew.slow(3000, [target])
    first = crew.start_worker()
    submitted = crew.submit(jobs)
    crew.wait_counted([target])
    first.kill()
    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs, reap=False))
    assert figures.outcomes[target] == "escalation:decision_interrupted"

    # The operator: what was sent, what it cost, what is unknown.
    status = cli(crew, "ledger", "status", "--json")
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)
    assert counts["jobs_open"] == 0
    assert counts["requests_sent"] == figures.requests  # the ledger agrees with the provider
    assert counts["calls_by_status"]["unknown"] == 1
    assert counts["cost_by_basis"]["unknown"] is None  # unknown cost is never reported as 0
    unknown = cli(crew, "ledger", "unknown")
    assert unknown.returncode == 0 and target in unknown.stdout
    assert "1 unknown call" in unknown.stdout
    reap = cli(crew, "ledger", "reap")
    assert "escalated 0 job(s)" in reap.stdout  # nothing was left for the reaper

    # The reviewer: list, claim (once), check, resolve.
    listed = cli(crew, "escalations", "list", "--reason", "decision_interrupted")
    assert target in listed.stdout, listed.stdout
    claimed = cli(crew, "escalations", "claim", "--reason", "decision_interrupted",
                  "--reviewer", "ann", "--json")
    assert claimed.returncode == 0, claimed.stderr
    item = json.loads(claimed.stdout)
    assert item["escalation"]["job_id"] == target
    assert set(item["escalation"]["context"]["questions"]) == {"urgent", "team", "mood"}
    again = cli(crew, "escalations", "claim", "--reason", "decision_interrupted",
                "--reviewer", "bob")
    assert again.returncode == 1  # ann holds it
    wrong = cli(crew, "escalations", "resolve", item["id"], "--reviewer", "ann",
                "--answer", json.dumps({"urgent": True, "team": "marketing", "mood": "calm"}))
    assert wrong.returncode == 2 and "answer.team" in wrong.stderr
    answer = {"urgent": True, "team": "billing", "mood": "calm"}
    done = cli(crew, "escalations", "resolve", item["id"], "--reviewer", "ann",
               "--answer", json.dumps(answer))
    assert done.returncode == 0, done.stderr

    resolutions = [
        reply
        for reply in crew.client().replies(crew.stream, include_resolutions=True)
        if isinstance(reply, ResolutionMessage)
    ]
    assert [(r.job_id, r.reviewer, r.reason) for r in resolutions] == [
        (target, "ann", "decision_interrupted")
    ]
    assert resolutions[0].answer == {"urgent": True, "team": "billing", "mood": 0}
    assert target not in cli(crew, "escalations", "list").stdout
    assert crew.counted(target) == 1  # and the provider was never asked again
