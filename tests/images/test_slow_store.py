"""An image store that answers slowly is bounded by the fetch timeout and the job's deadline.

httpx's timeout bounds each read, not the response: a store that sends one byte a second
(or its headers a line at a time) never trips it, and held the job, its in-flight slot and
its delivery past the visibility timeout. The fetch of each ref is bounded as a whole by
``DECISIONS_IMAGE_FETCH_TIMEOUT_S``, and all of them by the time left to the job's deadline.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.settings import Settings
from worker.kinds.image_store import resolve_refs

_PNG_HEAD = b"\x89PNG\r\n\x1a\n"


def _slow_store(mode: str) -> tuple[socket.socket, threading.Event]:
    """A store on a free port answering every request slowly: ``body`` (headers at once,
    then a byte a second) or ``headers`` (the status line, then a header line a second)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if mode == "body":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                        b"Content-Length: 100000\r\n\r\n" + _PNG_HEAD
                    )
                    chunk = b"x"
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    chunk = b"X-Slow: 1\r\n"
                while not stop.wait(0.2):
                    conn.sendall(chunk)
            except OSError:
                pass

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, stop


@pytest.fixture(params=["body", "headers"])
def slow_prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    listener, stop = _slow_store(request.param)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/imgs/"
    finally:
        stop.set()
        listener.close()


def _job(ref: str, **fields: Any) -> Any:
    return parse_job(
        {
            "id": "slow-1",
            "kind": "route",
            "reply_to": "replies",
            "model": "faux-1",
            "state": {"invoice": "<a>"},
            "routes": {"pay": None, "hold": None},
            "images": {"a": {"format": "png", "ref": ref}},
            **fields,
        }
    )


def _timed_refusal(job: Any, settings: Settings, **kwargs: Any) -> tuple[float, str]:
    started = time.monotonic()
    with pytest.raises(JobInvalid) as info:
        asyncio.run(resolve_refs(job, settings, **kwargs))
    assert [p.field for p in info.value.problems] == ["images.a.ref"]
    return time.monotonic() - started, info.value.problems[0].message


def test_a_slow_store_is_cut_off_at_the_fetch_timeout(slow_prefix: str) -> None:
    settings = Settings(_env_file=None, image_stores=[slow_prefix], image_fetch_timeout_s=1)
    took, why = _timed_refusal(_job(slow_prefix + "a.png"), settings)
    assert "in time" in why
    assert took < 10  # unbounded, it ran until the store's 100,000 bytes (hours)


def test_a_slow_store_is_cut_off_at_the_jobs_deadline(slow_prefix: str) -> None:
    settings = Settings(_env_file=None, image_stores=[slow_prefix], image_fetch_timeout_s=120)
    took, why = _timed_refusal(_job(slow_prefix + "a.png"), settings, timeout_s=1.0)
    assert "in time" in why
    assert took < 10


def test_a_job_past_its_deadline_fetches_nothing(slow_prefix: str) -> None:
    settings = Settings(_env_file=None, image_stores=[slow_prefix], image_fetch_timeout_s=120)
    job = _job(slow_prefix + "a.png", deadline=datetime.now(UTC) - timedelta(seconds=1))
    _, why = _timed_refusal(job, settings, timeout_s=-1.0)
    assert "deadline" in why
