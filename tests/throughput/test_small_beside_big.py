"""Issue 18: a job with many requests must not hold back small ones.

Four sifts of 3,000 items (30 requests each, sent one after another, every answer 200 ms
away at the faux) are running in a default ``decisions worker`` when fifty single-job
messages arrive. A job waits for a request slot of its provider, not for a pool slot that a
big job holds for its whole run, so every small job is answered before any sift is. (A
worker on two pool processes, one message each, as ``decisions worker`` ran before the loop
pool, answered all fifty after the four sifts: this test fails there.)

And a slow provider must not starve jobs for another: its requests fill its own slots
(``DECISIONS_MAX_IN_FLIGHT`` is per provider), so jobs for a fast one go on beside them. A
backlog of the slow provider's jobs ahead in the queue, longer than the worker's reserve
(``2 x DECISIONS_MAX_IN_FLIGHT`` jobs), used to fill the reserve, and what came after it
waited until the backlog drained; now the messages of a provider whose slots and waiting
share are full are handed back to the queue (``worker.process.deferral``), so the jobs behind
are taken.

Real parts: a Redis broker and stream, a PostgreSQL ledger, a ``decisions worker`` and
``decisions faux serve`` processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.client import Client
from shared.settings import Settings
from tests.judgments.support import PARALLEL_TEST_KEY, sift_job
from tests.support.fleet import decide_job
from tests.support.processes import decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 7
REPLIES = "small-beside-big"
SIFTS = 4
ITEMS = 3000  # 30 requests of 100 items at the parallel flavour
SMALL = 50


def _first_requests_sent(faux_url: str, job_ids: list[str], timeout_s: float = 60) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        calls = dict(httpx.get(f"{faux_url}/_faux/calls", timeout=5).json())
        if all(f"{job_id}/sift.0" in calls for job_id in job_ids):
            return
        time.sleep(0.05)
    raise TimeoutError("the sifts never sent their first requests")


def _client(ledger_url: str, faux_url: str) -> Client:
    return Client(
        Settings(
            _env_file=None,
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
        )
    )


def _worker_env(ledger_url: str, faux_url: str, parallel_url: str, **more: str) -> dict[str, str]:
    """A worker's environment: ``faux`` answered at ``faux_url``, parallel at ``parallel_url``."""
    env = decisions_env(
        broker_url=redis_url(REDIS_DB),
        redis_url=redis_url(REDIS_DB),
        ledger_url=ledger_url,
        faux_url=faux_url,
        parallel_base_url=parallel_url,
        **more,
    )
    env["PARALLEL_API_KEY"] = PARALLEL_TEST_KEY
    return env


def _reply_order(
    client: Client, first: list[dict[str, Any]], parallel_url: str, started: int, then: list[str]
) -> list[str]:
    """Jobs in the order their replies came: the parallel jobs ``first``, one a message, then,
    once ``started`` of them have sent their first requests, decide jobs ``then``, each its
    own ``Client.submit`` (as a producer sends events)."""
    client.submit_batch(first, reply_to=REPLIES, chunk_size=1)
    _first_requests_sent(parallel_url, [job["id"] for job in first[:started]])
    for job_id in then:
        client.submit(decide_job(job_id), reply_to=REPLIES)
    ids = [*(job["id"] for job in first), *then]
    return [reply.job_id for reply in client.replies(REPLIES, job_ids=ids, timeout_s=180)]


def _answered_first(order: list[str], first: list[str], then: list[str]) -> list[str]:
    """The jobs of ``first`` answered after one of ``then`` (none: all of them before)."""
    assert sorted(order) == sorted([*first, *then])
    earliest = min(order.index(job_id) for job_id in then)
    return [job_id for job_id in first if order.index(job_id) > earliest]


def test_small_jobs_are_answered_while_big_sifts_run(tmp_path: Path) -> None:
    with (
        redis_database(REDIS_DB),
        postgres_schema("smallbig") as ledger_url,
        faux_server("--latency-ms", "200", log=tmp_path / "faux.log") as faux_url,
    ):
        env = _worker_env(ledger_url, faux_url, faux_url)
        with worker_process(env, "--migrate", log=tmp_path / "worker.log"):
            items = [f"message {k}" for k in range(ITEMS)]
            big = [f"big-{i}" for i in range(SIFTS)]
            small = [f"small-{i}" for i in range(SMALL)]
            order = _reply_order(
                _client(ledger_url, faux_url),
                [sift_job(job_id, items, provider="parallel") for job_id in big],
                faux_url,
                SIFTS,
                small,
            )

    waited = _answered_first(order, small, big)
    assert not waited, f"{len(waited)} small job(s) answered only after a sift: {order}"


@contextmanager
def _slow_and_fast(
    tmp_path: Path, schema: str, slow_ms: int, slots: int
) -> Iterator[tuple[Client, str]]:
    """A worker with ``slots`` per provider: ``faux`` answering at once and ``parallel``
    (the slow provider) ``slow_ms`` away; yields a client and the slow faux's URL."""
    with (
        redis_database(REDIS_DB),
        postgres_schema(schema) as ledger_url,
        faux_server("--latency-ms", str(slow_ms), log=tmp_path / "slow.log") as slow_url,
        faux_server(log=tmp_path / "fast.log") as fast_url,
    ):
        env = _worker_env(ledger_url, fast_url, slow_url, max_in_flight=str(slots))
        with worker_process(env, "--migrate", log=tmp_path / "worker.log"):
            yield _client(ledger_url, fast_url), slow_url


def test_a_slow_provider_fills_its_own_slots_only(tmp_path: Path) -> None:
    slots = 4
    with _slow_and_fast(tmp_path, "slowfast", 5000, slots) as (client, slow_url):
        # A round of its slots and half a round waiting: within the reserve (2 x slots).
        slow = [f"slow-{i}" for i in range(slots + slots // 2)]
        fast = [f"fast-{i}" for i in range(SMALL)]
        order = _reply_order(
            client,
            [sift_job(job_id, ["one message"], provider="parallel") for job_id in slow],
            slow_url,
            slots,
            fast,
        )

    waited = _answered_first(order, fast, slow)
    assert not waited, f"{len(waited)} job(s) of the fast provider waited: {order}"


def test_a_slow_providers_backlog_does_not_hold_the_jobs_behind_it(tmp_path: Path) -> None:
    """A worker serving two providers (a fast job first), then twenty-four jobs of one
    answering in 3 s, four slots: six rounds. Twenty fast jobs queued behind them used to
    wait for the backlog to drain to the reserve (twenty slow jobs answered first); now the
    slow messages past the slots and a waiting share go back to the queue, and the fast jobs
    are taken and answered while the first rounds run."""
    slots = 4
    with _slow_and_fast(tmp_path, "backlog", 3000, slots) as (client, slow_url):
        served = client.submit(decide_job("served-first"), reply_to=REPLIES)
        replies = client.replies(REPLIES, job_ids=served.job_ids, timeout_s=60)
        assert [reply.type for reply in replies] == ["result"]
        slow = [f"backlog-{i}" for i in range(6 * slots)]
        fast = [f"behind-{i}" for i in range(SMALL // 2 - 5)]
        order = _reply_order(
            client,
            [sift_job(job_id, ["one message"], provider="parallel") for job_id in slow],
            slow_url,
            slots,
            fast,
        )
        slow_calls = dict(httpx.get(f"{slow_url}/_faux/calls", timeout=5).json())

    last_fast = max(order.index(job_id) for job_id in fast)
    answered_before = [job_id for job_id in slow if order.index(job_id) < last_fast]
    assert len(answered_before) <= 2 * slots, (
        f"{len(answered_before)} slow jobs were answered before the last fast one: {order}"
    )
    # Every slow job was sent once, handed back or not.
    assert sorted(k.split("/")[0] for k in slow_calls) == sorted(slow)
