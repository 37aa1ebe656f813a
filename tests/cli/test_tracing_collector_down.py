"""``decisions submit`` with tracing on and no collector answering: the jobs are submitted,
and the spans that could not be exported are one line of ours naming the setting, not the
OpenTelemetry SDK's retry lines (it printed four, "Transient error ... retrying")."""

from __future__ import annotations

import json
from pathlib import Path

from shared.keys import CELERY_QUEUE
from tests.cli.support import decisions, traceback_in
from tests.support.services import free_port, redis_database, redis_url

REDIS_DB = 9
JOB = {"id": "traced-1", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}


def test_a_collector_that_does_not_answer_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    batch = tmp_path / "jobs.jsonl"
    batch.write_text(json.dumps(JOB) + "\n")
    nobody = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    with redis_database(REDIS_DB) as r:
        url = redis_url(REDIS_DB)
        done = decisions(
            "submit", str(batch), "--reply-to", "traced:replies",
            cwd=tmp_path, redis_url=url, broker_url=url, otel_endpoint=nobody,
        )  # fmt: skip
        queued = r.llen(CELERY_QUEUE)
    assert traceback_in(done.output) is None
    assert done.code == 0, done.output
    assert "submitted 1 job(s)" in done.stdout
    assert queued == 1
    about_tracing = [line for line in done.stderr.splitlines() if "span" in line.lower()]
    assert len(about_tracing) == 1, done.stderr
    assert "DECISIONS_OTEL_ENDPOINT" in about_tracing[0]
    assert nobody in about_tracing[0]
    assert "Transient error" not in done.stderr and "retrying" not in done.stderr
