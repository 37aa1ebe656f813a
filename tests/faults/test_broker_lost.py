"""A message the Redis broker lost (popped by a worker killed inside kombu's BRPOP window,
before it was recorded unacknowledged: celery#4354, kombu#305) is answered without any
producer's help: the client recorded each job's intake before publishing, and a worker's
reaper republishes, after the visibility timeout, the jobs the ledger never saw and the
broker no longer holds (``worker.recovery.intake``). ``decisions status`` shows them meanwhile.

The lost pop is made by hand (``RPOP`` of the queue's next message, which is what a killed
consumer's ``BRPOP`` leaves behind); on the landed code those jobs were never answered.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

from shared import keys
from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import profile
from tests.support.processes import DECISIONS


def test_a_message_lost_in_the_brpop_window_is_republished_by_the_reaper(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures]
) -> None:
    crew = new_fleet("broker-lost", profile(3, reaper_interval_s="1"))
    jobs = crew.jobs(6)
    submitted = crew.submit(jobs, chunk_size=2)  # three messages, no worker yet
    assert crew.broker.llen(keys.CELERY_QUEUE) == 3
    popped = crew.broker.rpop(keys.CELERY_QUEUE)  # the oldest message: its two jobs are gone
    assert popped is not None
    gone = sorted(crew.where_are(submitted.job_ids).items())
    lost = [job_id for job_id, where in gone if where == "nowhere"]
    assert len(lost) == 2

    # The operator sees them: submitted, never taken by a worker.
    status = subprocess.run(
        [DECISIONS, "status", "--json", "--timeout", "0.5"],
        env=crew.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    intake = json.loads(status.stdout)["intake"]
    assert intake["waiting"] == 6, status.stdout

    began = time.monotonic()
    crew.start_worker()
    pairs = crew.pairs(submitted.job_ids)
    visibility = float(crew.settings["visibility_timeout_s"])
    missing = crew.wait_for(pairs, timeout_s=visibility + 30)
    assert not missing, f"never answered: {sorted(missing)}; {crew.broker_state()}"
    # The popped jobs came back only once their intake was older than the visibility timeout.
    figures = report(crew.check(pairs, reap=False))
    assert figures.lost == 0 and figures.duplicates == 0
    assert sorted(figures.broker_lost_ids) == lost
    # Recovered after the visibility timeout, which is above the deadline ceiling: past its
    # deadline, a recovered job escalates deadline_exceeded with nothing sent (a person
    # decides), as any job dequeued late does.
    for job_id in lost:
        assert figures.outcomes[job_id] == "escalation:deadline_exceeded"
        assert figures.requests_by_job[job_id] == 0
    assert time.monotonic() - began < visibility + 30
    # Every record is forgotten once its job ran: nothing is left to republish.
    assert crew.r.zcard(keys.INTAKE_TIMES) == 0 and crew.r.hlen(keys.INTAKE_JOBS) == 0
