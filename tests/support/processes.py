"""Real processes for integration tests: the faux server and `decisions worker`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.services import free_port

DECISIONS = str(Path(sys.executable).with_name("decisions"))


def decisions_env(**settings: str) -> dict[str, str]:
    """The environment of a `decisions` process with these settings. The CI Redis keeps
    nothing on disk, so workers accept volatile streams unless a test says otherwise
    (``accept_volatile_streams="0"``); and the suite's workers answer ``faux`` in process
    when no ``faux_url`` is given, which production never does unless asked
    (``faux_in_process="0"``: as production runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONS_")}
    env["DECISIONS_ACCEPT_VOLATILE_STREAMS"] = "1"
    env["DECISIONS_FAUX_IN_PROCESS"] = "1"
    env.update({f"DECISIONS_{k.upper()}": v for k, v in settings.items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def faux_server(*args: str, log: Path | None = None) -> Iterator[str]:
    """`decisions faux serve` on a free port; yields its base URL."""
    port = free_port()
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [DECISIONS, "faux", "serve", "--port", str(port), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/_faux/health", proc)
        yield url
    finally:
        stop(proc)


@contextmanager
def worker_process(
    env: Mapping[str, str], *args: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """`decisions worker` as its own process group, stopped warm (SIGTERM) at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [DECISIONS, "worker", *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_log(log, "ready.", proc)
            yield proc
        finally:
            stop(proc, group=True)


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout_s} s")


def wait_log(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(
                f"process exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.1)
    raise TimeoutError(
        f"{needle!r} not in {log} after {timeout_s} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


def stop(proc: subprocess.Popen[bytes], *, group: bool = False, timeout_s: float = 30) -> None:
    if proc.poll() is not None:
        return
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=10)
