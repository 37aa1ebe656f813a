"""Traces of provider and chat calls, with the SDK's in-memory exporter; and tracing off.

Each call is one span with the GenAI conventions' attributes and the project's call status,
cost and basis; nothing in any attribute is a key or a state. Off, nothing of OpenTelemetry
is imported and a span costs about a dict lookup.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import tracing
from shared.errors import DecisionProviderError
from worker.observability.tracing import CLAIM_SPAN, TASK_SPAN, claim_span, publish_span
from worker.providers import DecisionRequest, ParallelProvider, SystemOneProvider
from worker.providers.systemone import SystemOneConfig
from worker.runtimes import ChatConfig, ChatRuntime
from worker.testing.faux import FauxProvider

from .loopback import UNRESOLVABLE, LoopbackServer, Reply
from .support import FAST, deadline, questions

STATE_CANARY = "state-canary-7f3e9a"
STATE = f"Help! My payouts have been failing for 3 days. {STATE_CANARY}"


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


def _no_secret(finished: tuple[ReadableSpan, ...], *secrets: str) -> None:
    for span in finished:
        for key, value in (span.attributes or {}).items():
            for secret in secrets:
                assert secret not in str(value), (span.name, key)
                assert secret not in key
        assert all(secret not in span.name for secret in secrets)


def _faux(provider: str) -> Any:
    http = httpx.AsyncClient(transport=FauxProvider().transport())
    if provider == "parallel":
        return ParallelProvider(http=http, base_url="http://faux.invalid", policy=FAST)
    config = SystemOneConfig(
        name="openrouter",
        base_url="http://faux.invalid/api",
        key_env="OPENROUTER_API_KEY",
        default_model="typesafe/jev-1.14",
    )
    return SystemOneProvider(config, http=http, policy=FAST)


async def test_a_parallel_call_is_one_genai_span(spans: InMemorySpanExporter, keys: str) -> None:
    provider = _faux("parallel")
    result = await provider.decide(
        DecisionRequest(state=STATE, questions=questions(), call_key="j1/decide"), deadline()
    )
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert span.name == "decide parallel-fast" and span.kind.name == "CLIENT"
    assert attrs["gen_ai.operation.name"] == "decide"
    assert attrs["gen_ai.provider.name"] == "parallel"
    assert attrs["gen_ai.request.model"] == "parallel-fast"
    assert attrs["gen_ai.response.id"] == result.receipt.decision_id
    assert attrs["decisions.call.status"] == "answered"
    assert (attrs["decisions.cost_usd"], attrs["decisions.cost_basis"]) == (0.001, "estimate")
    assert attrs["decisions.step"] == "decide" and attrs["decisions.transport.attempts"] == 1
    _no_secret(spans.get_finished_spans(), keys, STATE_CANARY)


async def test_reported_input_tokens_are_on_the_span(
    spans: InMemorySpanExporter, keys: str
) -> None:
    await _faux("openrouter").decide(
        DecisionRequest(state=STATE, questions=questions()), deadline()
    )
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert attrs["decisions.cost_basis"] == "reported"
    _no_secret(spans.get_finished_spans(), keys, STATE_CANARY)


async def test_a_failed_call_has_its_error_code_and_ledger_status(
    spans: InMemorySpanExporter, keys: str
) -> None:
    async with httpx.AsyncClient() as http:
        provider = ParallelProvider(http=http, base_url=f"https://{UNRESOLVABLE}", policy=FAST)
        with pytest.raises(DecisionProviderError):
            await provider.decide(DecisionRequest(state=STATE, questions=questions()), deadline())
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["error.type"] == "connection" and attrs["decisions.call.status"] == "not_sent"
    assert span.status.status_code.name == "ERROR"
    _no_secret(spans.get_finished_spans(), keys, STATE_CANARY)


async def test_a_chat_call_is_one_genai_span(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACE_CHAT_KEY", "sk-chat-canary")
    completion = {
        "id": "gen-abc",
        "model": "org/model-7",
        "choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "cost": 0.00042},
    }
    async with LoopbackServer(Reply(body=completion)) as server, httpx.AsyncClient() as http:
        runtime = ChatRuntime(
            ChatConfig(
                name="loop", base_url=server.url, key_env="TRACE_CHAT_KEY", default_model="m"
            ),
            http=http,
            policy=FAST,
        )
        prepared = runtime.prepare([{"role": "user", "content": STATE}], call_key="j/pick.0")
        await runtime.send(prepared, deadline(), step="pick.0")
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert span.name == "chat m"
    assert (attrs["gen_ai.operation.name"], attrs["gen_ai.provider.name"]) == ("chat", "loop")
    assert attrs["gen_ai.usage.input_tokens"] == 10
    assert attrs["gen_ai.response.model"] == "org/model-7"
    assert (attrs["decisions.cost_usd"], attrs["decisions.cost_basis"]) == (0.00042, "reported")
    _no_secret(spans.get_finished_spans(), "sk-chat-canary", STATE_CANARY)


def test_context_crosses_a_message_through_its_headers(spans: InMemorySpanExporter) -> None:
    with tracing.span("decisions.submit", kind="producer"):
        headers = tracing.inject({})
    assert "traceparent" in headers

    class Request:  # a Celery task's request carries message headers as attributes
        traceparent = headers["traceparent"]

    with (
        tracing.continued(Request()),
        tracing.span(TASK_SPAN, kind="consumer"),
        publish_span(stream="r", job_id="j", message_type="escalation", escalation=True),
    ):
        pass
    submit, escalate, task = spans.get_finished_spans()
    assert escalate.name == "decisions.escalate"
    assert submit.context.trace_id == task.context.trace_id == escalate.context.trace_id
    assert task.parent is not None and task.parent.span_id == submit.context.span_id
    assert escalate.parent is not None and escalate.parent.span_id == task.context.span_id


#: Run in a fresh interpreter where ``opentelemetry`` cannot be imported (as without the
#: extra): every attempt is recorded with the project file that made it. (redis-py 8 tries
#: it on its own; only ours count.)
_OFF = """
import importlib.abc, os, sys
OURS = tuple(os.path.join(os.getcwd(), part) + os.sep for part in ("shared", "worker"))
ours = []
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "opentelemetry":
            return None
        frame = sys._getframe(1)
        while frame is not None and "importlib" in frame.f_code.co_filename:
            frame = frame.f_back
        importer = frame.f_code.co_filename if frame is not None else ""
        if importer.startswith(OURS):
            ours.append((name, os.path.relpath(importer, os.getcwd())))
        raise ImportError(name)
sys.meta_path.insert(0, Block())
import shared.client, worker.tasks, worker.providers, worker.runtimes, worker.observability.tracing
from shared import tracing
with tracing.span("x", a=1) as inside:
    pass
print(tracing.span("y") is tracing.NO_SPAN, inside, tracing.enabled(), tracing.inject({}), ours)
"""


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9"])
def test_off_imports_nothing_and_is_a_shared_no_op(endpoint: str | None) -> None:
    """Off by default; and on without the extra installed, a no-op with one warning.

    Off, a span is one shared null context (nothing built per call); what that costs is
    bench's business, not a timed assertion here.
    """
    env = {k: v for k, v in os.environ.items() if "OTEL" not in k}
    if endpoint:
        env["DECISIONS_OTEL_ENDPOINT"] = endpoint
    done = subprocess.run(
        [sys.executable, "-c", _OFF], env=env, capture_output=True, text=True, check=True
    )
    if endpoint is None:
        assert done.stdout.strip() == "True None False {} []", done.stdout
    else:
        # It tried (from shared/tracing.py), found nothing, and stays off.
        assert done.stdout.startswith("True None False {} [('opentelemetry"), done.stdout
        assert "shared/tracing.py" in done.stdout
        assert "pip install 'decision-worker[otel]'" in done.stderr


def test_claim_span_names_the_call_not_its_content(spans: InMemorySpanExporter) -> None:
    with claim_span(job_id="j1", step="verify.0", provider="parallel"):
        pass
    [span] = spans.get_finished_spans()
    assert span.name == CLAIM_SPAN
    assert dict(span.attributes or {}) == {
        "decisions.job_id": "j1",
        "decisions.step": "verify.0",
        "gen_ai.provider.name": "parallel",
    }
