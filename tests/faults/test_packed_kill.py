"""``kill -9`` of a worker between the packed requests of one message (jobs of one state
sharing requests, ``shared.packs``), then a new worker: no request goes out twice, every job
gets one terminal message, and the jobs of a request whose outcome was lost reach a person.

The message comes back after the broker's visibility timeout, which is longer than any
job's deadline (``worker.app.check_visibility_timeout``): a request not yet claimed is then
never sent (``deadline_exceeded``), one claimed is settled from the ledger.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

from shared.job_parsing import parse_job
from shared.jobs import DecideJob
from shared.judgments import SYSTEM_ONE_PACK_LIMITS
from shared.packs import pack_requests
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures, faux_calls

pytestmark = pytest.mark.faults

JOBS = 12
#: About 7,500 tokens a question: eight jobs fill a System One request of 64,000.
FILLER = "x" * 30_000


def packed_jobs(prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}-{i:02d}",
            "batch": prefix,
            "state": "One shared policy document.",
            "pack": True,
            "questions": {
                "applies": {"type": "noul", "instructions": f"Clause {i} applies? {FILLER}"}
            },
        }
        for i in range(JOBS)
    ]


def requests_of(jobs: list[dict[str, Any]]) -> list[list[str]]:
    parsed = [parse_job({**j, "reply_to": "x"}) for j in jobs]
    wires = [
        {qid: q.wire() for qid, q in job.questions.items()}
        for job in parsed
        if isinstance(job, DecideJob)
    ]
    groups = pack_requests(jobs[0]["state"], wires, SYSTEM_ONE_PACK_LIMITS)
    return [[jobs[i]["id"] for i in group] for group in groups]


@pytest.mark.parametrize(
    ("point", "in_request", "requests_sent", "second_request_ends"),
    [
        # The first request's jobs are recorded with their messages (published again on the
        # redelivery); the second request was never claimed: it is not sent late.
        pytest.param(
            "after_record", 0, 1, "escalation:deadline_exceeded", id="after-the-first-recorded"
        ),
        # The second request was answered but not recorded: its jobs reach a person, and it
        # is never sent again.
        pytest.param(
            "after_response", 1, 2, "escalation:decision_interrupted",
            id="second-answered-not-recorded",
        ),
    ],
)
def test_kill_9_between_packed_requests_then_a_new_worker(
    new_fleet: FleetFactory,
    report: Callable[[Figures], Figures],
    point: str,
    in_request: int,
    requests_sent: int,
    second_request_ends: str,
) -> None:
    crew = new_fleet(f"pack-{point}")
    jobs = packed_jobs(crew.name)
    requests = requests_of(jobs)
    assert len(requests) == 2 and all(len(r) > 1 for r in requests)
    target = requests[in_request][0]
    before = faux_calls(crew.faux_url)  # the faux server is the session's
    first = crew.start_worker(fault_point=point, fault_job=target, fault_kill_group="1")
    submitted = crew.submit(jobs, pack=True)
    assert submitted.messages == 1
    assert first.wait_exit(60) == -signal.SIGKILL, first.text()[-2000:]

    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs))

    sent = {k: v for k, v in faux_calls(crew.faux_url).items() if before.get(k) != v}
    assert all(k.startswith("pack:") for k in sent)
    assert len(sent) == requests_sent and set(sent.values()) == {1}  # none went out twice
    assert figures.lost == 0 and figures.duplicates == 0 and figures.jobs == JOBS
    # The checker ties each packed request to its members' claims, and counts it once.
    assert figures.requests == requests_sent
    assert {figures.outcomes[j] for j in requests[0]} == {"result"}
    assert {figures.outcomes[j] for j in requests[1]} == {second_request_ends}
