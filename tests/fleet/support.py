"""Helpers of the fleet tests: a worker process of one's own, scraping its metrics port,
steering the faux server, a flushed database of the suite's own redis-server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.support.ownservers import OwnRedis
from tests.support.processes import DECISIONS, wait_log

__all__ = ["Samples", "flushed", "patch_faux", "scrape", "total", "value", "worker"]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample the worker's endpoint serves, as Prometheus would parse it."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``; 0 when the worker has not exported it."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every sample whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def patch_faux(faux_url: str, changes: Mapping[str, Any]) -> None:
    httpx.patch(
        f"{faux_url}/_faux/behaviour", content=json.dumps(changes), timeout=10
    ).raise_for_status()


@contextmanager
def worker(
    env: Mapping[str, str], log: Path, *args: str, ready: bool = True
) -> Iterator[subprocess.Popen[bytes]]:
    """``decisions worker`` in its own session; stopped warm (SIGTERM to the main process)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [DECISIONS, "worker", "--without-mingle", "--without-gossip", *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        if ready:
            wait_log(log, "ready.", proc)
        yield proc
    finally:
        if proc.poll() is None:
            # The main process only: a signal to the group would kill the pool mid-task.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@contextmanager
def flushed(server: OwnRedis, db: int = 0) -> Iterator[tuple[redis.Redis, str]]:
    """A client of ``db`` on ``server`` and its URL, emptied before and after."""
    client = redis.Redis.from_url(server.url(db))
    client.flushdb()
    try:
        yield client, server.url(db)
    finally:
        client.flushdb()
        client.close()
