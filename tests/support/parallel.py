"""Each pytest-xdist worker gets a redis-server of its own.

The suites that use the shared Redis take fixed database numbers per folder
(``tests.support.services.redis_database``), so two workers on one server would flush each
other's databases. Under xdist (``make test`` runs ``-n``) each worker process starts a
throwaway ``redis-server`` on a free port before any test module reads ``TEST_REDIS_PORT``,
and stops it when the process exits. Without xdist nothing changes: the suite uses the Redis
that ``TEST_REDIS_PORT`` (default 6379) names. This module imports nothing of the suite's
own, since ``tests.support.services`` reads the port when it is imported.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time

__all__ = ["own_redis_per_worker"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def own_redis_per_worker() -> None:
    """Start this xdist worker's redis-server and point ``TEST_REDIS_PORT`` at it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit(
            "running the suite with -n (pytest-xdist) needs redis-server on the PATH: each "
            "worker starts its own; run without -n to use the Redis TEST_REDIS_PORT names"
        )
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix=f"decisions-redis-{worker}-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    atexit.register(stop)
    until = time.monotonic() + 30
    while not _answers(port):
        if proc.poll() is not None or time.monotonic() > until:
            raise SystemExit(f"the xdist worker's redis-server on port {port} did not start")
        time.sleep(0.05)
    os.environ["TEST_REDIS_HOST"] = "127.0.0.1"
    os.environ["TEST_REDIS_PORT"] = str(port)
