"""Four processes hammer one SQLite file: no "database is locked", one fresh claim per send.

The figure (commits, seconds, failures) is printed; run with ``-s`` to see it.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.replies import CallStatus
from worker.ledger import CallOutcome, Ledger

PROCESSES = 4
KEYS = 1000


def hammer(url: str, index: int, start: Any, out: Any) -> None:
    """Every process opens, claims and records every key, in its own order."""
    ledger = Ledger(url)  # created in the process that uses it
    order = list(range(KEYS))
    random.Random(index).shuffle(order)
    fresh: list[tuple[str, int]] = []
    retry: list[str] = []
    failures: list[str] = []
    commits = 0
    lease = datetime.now(UTC) + timedelta(minutes=10)

    def attempt(job_id: str, first_pass: bool) -> None:
        nonlocal commits
        claim = ledger.claim(
            job_id=job_id,
            step="decide",
            provider="faux",
            model="faux-1",
            request_sha256=job_id,
            lease_expires=lease,
        )
        commits += 1
        if not claim.fresh:
            return
        fresh.append((job_id, claim.call.claims))
        key = int(job_id.split("-")[1])
        # Even keys fail to connect on their first claim, so another claim must send them.
        status: CallStatus = (
            "not_sent" if key % 2 == 0 and claim.call.claims == 1 else "answered"
        )
        ledger.record(
            job_id=job_id,
            outcome=CallOutcome(step="decide", status=status, receipt_json=f'{{"by": {index}}}'),
        )
        commits += 1
        if status == "not_sent" and first_pass:
            retry.append(job_id)

    start.wait()
    started = time.perf_counter()
    for key in order:
        job_id = f"job-{key}"
        try:
            ledger.open_job(
                job_id=job_id,
                kind="decide",
                batch="hammer",
                reply_to="r",
                fingerprint="f",
                deadline=lease,
                job_json="{}",
            )
            commits += 1
            attempt(job_id, first_pass=True)
        except Exception as error:
            failures.append(f"{type(error).__name__}: {error}")
    for job_id in retry:  # nobody else came by after our not_sent: send it ourselves
        try:
            attempt(job_id, first_pass=False)
        except Exception as error:
            failures.append(f"{type(error).__name__}: {error}")
    out.put((index, fresh, commits, failures, time.perf_counter() - started))
    ledger.dispose()


def test_four_processes_share_one_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    setup = Ledger(url)
    setup.migrate()
    setup.dispose()  # nothing open in this process while the children run

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    children = [ctx.Process(target=hammer, args=(url, i, start, out)) for i in range(PROCESSES)]
    for child in children:
        child.start()
    time.sleep(0.5)  # let the children import before the clock starts
    began = time.perf_counter()
    start.set()
    results = [out.get(timeout=240) for _ in children]
    wall = time.perf_counter() - began
    for child in children:
        child.join(30)
        assert child.exitcode == 0

    failures = [f for r in results for f in r[3]]
    commits = sum(r[2] for r in results)
    with capsys.disabled():
        print(
            f"\nSQLite, {PROCESSES} processes on one file: {commits} commits in {wall:.2f} s "
            f"({commits / wall:.0f}/s), {len(failures)} failed"
        )
    assert failures == []

    fresh_by_key: dict[str, list[int]] = {}
    for _, fresh, *_rest in results:
        for job_id, claims in fresh:
            fresh_by_key.setdefault(job_id, []).append(claims)
    assert len(fresh_by_key) == KEYS
    for job_id, claims in fresh_by_key.items():
        key = int(job_id.split("-")[1])
        # Exactly one fresh claim per send: odd keys once, even keys once more after not_sent.
        assert sorted(claims) == ([1, 2] if key % 2 == 0 else [1]), job_id

    check = Ledger(url)
    try:
        status = check.status("hammer")
        assert status.jobs_total == KEYS
        assert status.calls_by_status == {"answered": KEYS}
        assert status.claims_total == KEYS + KEYS // 2
    finally:
        check.dispose()
