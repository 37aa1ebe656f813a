"""The worker's log lines, as a log pipeline reads them: one JSON object a line, the
process id on each, secrets dropped, and httpx's per-request line kept out."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import logging, os, structlog
from worker.process.logs import configure_logging
configure_logging(fmt="json")
print(os.getpid(), flush=True)
structlog.get_logger("decisions.runner").info(
    "call.finished", job_id="j1", api_key="sk-live-123", url="redis://user:pw@host:6379/0"
)
logging.getLogger("httpx").info("HTTP Request: POST https://example.invalid 200 OK")
logging.getLogger("httpx").warning("something httpx warns about")
logging.getLogger("celery.apps.worker").info("celery@host ready.")
"""


def test_json_lines_carry_the_process_and_never_a_secret() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(done.stdout.strip())
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    events = {line["event"]: line for line in lines}
    assert set(events) == {
        "call.finished", "something httpx warns about", "celery@host ready."
    }, events
    assert all(line["process"] == pid for line in lines)
    finished = events["call.finished"]
    assert finished["job_id"] == "j1" and finished["level"] == "info"
    assert finished["api_key"] == "[redacted]"
    assert finished["url"] == "redis://user:***@host:6379/0"
    assert "sk-live-123" not in done.stderr and ":pw@" not in done.stderr
