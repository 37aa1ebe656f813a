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


REFUSED_SCRIPT = """
import logging
from celery.worker.consumer import consumer as c
from worker.process.logs import configure_logging
configure_logging(fmt="json")
log = logging.getLogger(c.__name__)
body = "{'jobs': [{'state': 'Jane Roe, 12 Elm St, card 4111-1111'}]}"
headers = {"argsrepr": "({'state': 'Jane Roe, 12 Elm St'},)", "task": "decisions.run_jobs"}
exc = ValueError("decisions.run_jobs: the task takes one argument, jobs")
log.error(c.INVALID_TASK_ERROR, exc, body, exc_info=False)
log.error(c.UNKNOWN_TASK_ERROR, exc, body, headers, {"routing_key": "decisions"})
log.warning(c.UNKNOWN_FORMAT, "body: " + body)
log.critical(c.MESSAGE_DECODE_ERROR, exc, "application/json", "utf-8", headers, body)
"""


def test_a_message_celery_refuses_is_logged_without_its_body_or_headers() -> None:
    """Celery's consumer logs up to 1 KiB of a message it refuses, and its headers (whose
    argsrepr is the jobs again): a job's state, personal data included, in the worker's log.
    The lines stay (the guard's task.poison line says what was wrong), the contents go."""
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert len(lines) == 4, done.stderr
    assert "Jane Roe" not in done.stderr
    assert all("left out" in line["event"] for line in lines), lines
    assert "the task takes one argument, jobs" in lines[0]["event"]


CONTROL_SCRIPT = """
import logging, sys
from worker.process.logs import configure_logging
configure_logging(level=sys.argv[1], fmt="json")
try:
    raise AttributeError("'LoopPool' object has no attribute 'grow'")
except AttributeError as exc:
    logging.getLogger("kombu.pidbox").error("pidbox command error: %r", exc, exc_info=True)
try:
    raise KeyError("nope.task")
except KeyError:
    logging.getLogger("celery.worker.control").exception("Rate limit attempt for unknown task")
try:
    raise RuntimeError("a bug of ours")
except RuntimeError:
    logging.getLogger("decisions.runner").exception("runner.failed")
"""


def _control_lines(level: str) -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-c", CONTROL_SCRIPT, level],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return {line["logger"]: line for line in lines}


def test_a_remote_control_command_gone_wrong_is_one_line_without_a_traceback() -> None:
    """``celery control pool_grow`` on the loop pool, a rate limit for a task that does not
    exist: an operator's mistake, answered with the error; the worker's log says it in one
    line, not with a traceback of kombu's and Celery's code. Other loggers keep theirs."""
    lines = _control_lines("INFO")
    pidbox, control = lines["kombu.pidbox"], lines["celery.worker.control"]
    assert "has no attribute 'grow'" in pidbox["event"] and pidbox["level"] == "error"
    assert "unknown task" in control["event"]
    assert "exception" not in pidbox and "exception" not in control, lines
    assert "Traceback" in lines["decisions.runner"]["exception"]
    # At DEBUG, whoever is debugging the worker gets the traceback too.
    assert "Traceback" in _control_lines("DEBUG")["kombu.pidbox"]["exception"]
