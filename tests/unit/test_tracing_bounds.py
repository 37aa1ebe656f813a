"""What a span keeps of an exception (its type's name only), and how long ``tracing.flush``
may hold a process that exits (its timeout, whatever the collector does).

The SDK's default recorded an exception leaving a span as an event with its message and
stack, and its text as the status: a ledger ``DataError`` was exported with its SQL
parameters (parts of a job's state) and about 12 kB of stack. ``flush(5.0)`` took 19.7 s
with a collector that accepts connections and never answers: the SDK's ``force_flush``
ignores its timeout and waits out the exporter's for each batch.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import tracing
from shared.settings import Settings

CANARY = "CONFIDENTIAL-STATE-Jane-Doe"


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


class DataError(Exception):
    """Stands in for sqlalchemy's: its text holds the statement's parameters."""


def test_an_exception_leaves_only_its_type_name_on_the_span(
    spans: InMemorySpanExporter,
) -> None:
    with pytest.raises(DataError), tracing.span("decisions.ledger.claim", job="j1"):
        raise DataError(f"[parameters: {{'job_json': '{{\"state\": \"{CANARY}\"}}'}}]")
    with pytest.raises(ValueError), tracing.span("outer"), tracing.span("inner"):
        raise ValueError(CANARY)
    finished = {span.name: span for span in spans.get_finished_spans()}
    assert set(finished) == {"decisions.ledger.claim", "outer", "inner"}
    claim = finished["decisions.ledger.claim"]
    assert claim.events == ()
    assert claim.status.status_code.name == "ERROR"
    assert dict(claim.attributes or {}) == {
        "job": "j1",
        tracing.EXCEPTION_TYPE: f"{__name__}.DataError",
    }
    for span in finished.values():
        assert span.events == ()
        exported = repr((span.attributes, span.status.description, span.events))
        assert CANARY not in exported and "Traceback" not in exported
    assert finished["inner"].attributes == {tracing.EXCEPTION_TYPE: "ValueError"}
    assert finished["inner"].status.description == "ValueError"


def test_a_span_left_normally_keeps_no_error(spans: InMemorySpanExporter) -> None:
    with tracing.span("fine", n=1):
        pass
    [span] = spans.get_finished_spans()
    assert span.status.status_code.name == "UNSET"
    assert dict(span.attributes or {}) == {"n": 1}


@pytest.fixture
def configured() -> Iterator[None]:
    """Tracing decided from settings in the test; its provider shut down after (once the
    collector below is gone, so that no export still waits on it)."""
    tracing.install(None)
    try:
        yield
    finally:
        tracing.install(None)


@pytest.fixture
def silent_collector(configured: None) -> Iterator[str]:
    """A collector that accepts connections and never answers; its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in held:  # the exports waiting on them fail at once
            conn.close()


def test_flush_returns_within_its_timeout_when_the_collector_never_answers(
    silent_collector: str,
) -> None:
    settings = Settings(_env_file=None, DECISIONS_OTEL_ENDPOINT=silent_collector)
    # Three batches (the SDK sends 512 spans a batch), each waiting out a 2 s export.
    assert tracing.configure(settings, export_timeout_s=2.0)
    for i in range(1200):
        with tracing.span("decisions.call", n=i):
            pass
    started = time.monotonic()
    handed_over = tracing.flush(0.5)
    assert time.monotonic() - started < 2.0
    assert handed_over is False  # the spans still batched are lost with the process


def test_flush_with_tracing_off_is_done_at_once(
    configured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DECISIONS_OTEL_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert tracing.configure(Settings(_env_file=None)) is False
    assert tracing.flush(0.5) is True
