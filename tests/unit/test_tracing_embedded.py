"""A job's whole trace in one process: the embedded worker (a real Celery worker on a memory
broker), the SDK's in-memory exporter, the faux on loopback. Submit, the task, the provider
call, its ledger claim and the publish (an escalation's named so) share one trace."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import tracing
from shared.settings import Settings
from tests.support.fleet import decide_job
from worker.embedded import run_batch
from worker.process import context
from worker.testing.faux import FauxServer


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()
        context.configure()


def test_submit_task_call_and_publish_share_one_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    plain = decide_job("embedded-1")
    unsure = decide_job("embedded-2")
    unsure["questions"] = copy.deepcopy(unsure["questions"])
    for question in unsure["questions"].values():
        question["escalate_below"] = 1.0
    with FauxServer() as server:
        settings = Settings(
            _env_file=None, ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}", faux_url=server.url
        )
        run_batch([plain, unsure], settings=settings, out_dir=tmp_path / "out", timeout_s=60)
    finished = spans.get_finished_spans()
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    [submit] = by_name["decisions.submit"]
    tasks = by_name["decisions.run_jobs"]
    calls = [s for s in finished if s.attributes and s.attributes.get("gen_ai.operation.name")]
    [publish] = by_name["decisions.publish"]
    [escalate] = by_name["decisions.escalate"]
    claims = by_name["decisions.ledger.claim"]
    assert len(calls) == 2
    assert sorted(dict(c.attributes or {})["decisions.job_id"] for c in claims) == [
        "embedded-1",
        "embedded-2",
    ]
    traced = [submit, *tasks, *claims, *calls, publish, escalate]
    assert {_trace(s) for s in traced} == {_trace(submit)}
    assert dict(publish.attributes or {})["decisions.job_id"] == "embedded-1"
    escalated = dict(escalate.attributes or {})
    assert escalated["decisions.job_id"] == "embedded-2"
    assert escalated["decisions.message_type"] == "escalation"


def _trace(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id
