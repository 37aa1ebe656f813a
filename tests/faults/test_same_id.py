"""The same job id submitted twice at the same moment by two producers (two ``decisions
submit`` processes): one request reaches the provider, each producer gets one terminal
message, and a conflicting body under a taken id is rejected naming ``id``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.conftest import FleetFactory
from tests.support.checker import Figures
from tests.support.fleet import Fleet
from tests.support.processes import DECISIONS

pytestmark = pytest.mark.faults


def submit_together(crew: Fleet, batches: list[tuple[Path, str]]) -> None:
    """Start every ``decisions submit`` at once and wait for all of them."""
    producers = [
        subprocess.Popen(
            [DECISIONS, "submit", str(path), "--reply-to", stream],
            env=crew.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for path, stream in batches
    ]
    for producer in producers:
        out, _ = producer.communicate(timeout=60)
        assert producer.returncode == 0, out.decode()


def write_batch(path: Path, jobs: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(job) + "\n" for job in jobs))
    return path


@pytest.mark.parametrize("streams", ["one-stream", "own-streams"])
def test_two_producers_submit_the_same_job_ids_at_once(
    new_fleet: FleetFactory,
    report: Callable[[Figures], Figures],
    tmp_path: Path,
    streams: str,
) -> None:
    crew = new_fleet(f"same-id-{streams}")
    crew.start_worker(worker_concurrency="2")
    crew.start_worker(worker_concurrency="2")
    jobs = crew.jobs(6)
    crew.slow(800, [j["id"] for j in jobs])  # both deliveries of a job overlap
    a = write_batch(tmp_path / "a.jsonl", jobs)
    b = write_batch(tmp_path / "b.jsonl", list(reversed(jobs)))
    stream_b = crew.stream if streams == "one-stream" else f"{crew.stream}-b"
    submit_together(crew, [(a, crew.stream), (b, stream_b)])

    ids = [j["id"] for j in jobs]
    pairs = sorted({*crew.pairs(ids), *crew.pairs(ids, stream_b)})
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs, reap=False))
    assert all(figures.requests_by_job[i] == 1 for i in ids)
    assert figures.results == len(pairs)
    assert figures.duplicates == 0


def test_a_conflicting_body_under_the_same_id_is_rejected_naming_id(
    new_fleet: FleetFactory, report: Callable[[Figures], Figures], tmp_path: Path
) -> None:
    crew = new_fleet("same-id-conflict")
    crew.start_worker(worker_concurrency="2")
    [job] = crew.jobs(1)
    other = {**job, "state": "a different ticket altogether"}
    crew.slow(800, [job["id"]])
    stream_b = f"{crew.stream}-b"
    submit_together(
        crew,
        [
            (write_batch(tmp_path / "a.jsonl", [job]), crew.stream),
            (write_batch(tmp_path / "b.jsonl", [other]), stream_b),
        ],
    )
    pairs = [(job["id"], crew.stream), (job["id"], stream_b)]
    crew.expect_replies(pairs, timeout_s=60)
    figures = report(crew.check(pairs, reap=False))
    assert figures.requests_by_job[job["id"]] == 1
    # Whichever body opened the job first is answered; the other producer is told why not.
    kinds = sorted(json.loads(e.message)["type"] for s in (crew.stream, stream_b)
                   for e in crew.entries(s))
    assert kinds == ["rejected", "result"]
    rejected = next(
        json.loads(e.message)
        for s in (crew.stream, stream_b)
        for e in crew.entries(s)
        if e.type == "rejected"
    )
    assert [p["field"] for p in rejected["problems"]] == ["id"]
