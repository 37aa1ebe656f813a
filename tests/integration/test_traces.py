"""A job's trace, from the producer's submit to the provider call in a real worker process,
read back by an OTLP/HTTP receiver on loopback.

The receiver is a tiny HTTP server that takes ``POST /v1/traces`` (protobuf) and decodes it
with ``opentelemetry-proto``, as a collector would. The producer (this process) and a
``decisions worker`` process both export to it; the test reads their spans and checks that
one trace id runs from ``decisions.submit`` through the Celery message to the provider span,
with the GenAI attributes, and that no key and no state appears anywhere in what was sent.
"""

from __future__ import annotations

import gzip
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from shared import tracing
from shared.client import Client
from shared.settings import Settings
from tests.support.fleet import QUESTIONS
from tests.support.processes import decisions_env, faux_server, worker_process
from tests.support.services import postgres_schema, redis_database, redis_url

pytestmark = pytest.mark.integration

REDIS_DB = 12
KEY_CANARY = f"sk-trace-canary-{uuid.uuid4().hex}"
STATE_CANARY = f"state-canary-{uuid.uuid4().hex}"


@dataclass
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


@dataclass
class Receiver:
    """What an OTLP/HTTP collector on loopback received: raw bodies and decoded spans."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        decoded = []
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    decoded.append(
                        Span(
                            service,
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in s.attributes},
                        )
                    )
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(decoded)

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            received.add(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("traces")
    with (
        redis_database(REDIS_DB),
        postgres_schema("traces") as ledger_url,
        faux_server(log=logs / "faux.log") as faux_url,
    ):
        env = decisions_env(
            broker_url=redis_url(REDIS_DB),
            redis_url=redis_url(REDIS_DB),
            ledger_url=ledger_url,
            faux_url=faux_url,
            parallel_base_url=faux_url,
        )
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        # OpenTelemetry's own variable (the setting's alias), and a short export delay.
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
        env["PARALLEL_API_KEY"] = KEY_CANARY
        with worker_process(env, "--migrate", log=logs / "worker.log"):
            settings = Settings(
                broker_url=redis_url(REDIS_DB),
                redis_url=redis_url(REDIS_DB),
                ledger_url=ledger_url,
                DECISIONS_OTEL_ENDPOINT=receiver.url,
            )
            tracing.install(None)  # this process decides again, from these settings
            try:
                yield {"settings": settings, "logs": logs}
            finally:
                tracing.install(None)  # exports what is left, then off


def _wait(receiver: Receiver, name: str, n: int, timeout_s: float = 30) -> list[Span]:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        found = receiver.named(name)
        if len(found) >= n:
            return found
        time.sleep(0.1)
    seen = sorted({s.name for s in receiver.spans})
    raise AssertionError(f"no {name!r} span reached the receiver in {timeout_s} s; saw {seen}")


def test_one_trace_from_submit_to_the_provider_call(
    rig: dict[str, Any], receiver: Receiver
) -> None:
    job = {
        "id": f"traced-{uuid.uuid4().hex[:8]}",
        "kind": "decide",
        "provider": "parallel",
        "state": {"body": f"The invoice is wrong. {STATE_CANARY}"},
        "questions": QUESTIONS,
    }
    client = Client(rig["settings"])
    report = client.submit_batch([job], reply_to="traces-r1")
    assert report.job_ids == [job["id"]]
    [reply] = list(client.replies("traces-r1", job_ids=report.job_ids, timeout_s=60))
    assert reply.type == "result", reply
    tracing.flush()

    [submit] = _wait(receiver, "decisions.submit", 1)
    [task] = _wait(receiver, "decisions.run_jobs", 1)
    [call] = _wait(receiver, "decide parallel-fast", 1)
    assert submit.service == "decision-producer" and task.service == "decision-worker"
    # One trace: submit -> (Celery message headers) -> task -> provider call.
    assert submit.trace_id == task.trace_id == call.trace_id
    assert task.parent_id == submit.span_id
    assert call.parent_id == task.span_id

    attrs = call.attributes
    assert attrs["gen_ai.operation.name"] == "decide"
    assert attrs["gen_ai.provider.name"] == "parallel"
    assert attrs["gen_ai.request.model"] == "parallel-fast"
    assert attrs["decisions.call.status"] == "answered"
    assert (attrs["decisions.cost_usd"], attrs["decisions.cost_basis"]) == (0.001, "estimate")
    assert attrs["decisions.step"] == "decide"

    # Nothing anywhere in what was exported holds the key or the state.
    with receiver.lock:
        exported = b"".join(receiver.bodies)
    assert KEY_CANARY.encode() not in exported
    assert STATE_CANARY.encode() not in exported
    assert "The invoice is wrong" not in str([s.attributes for s in receiver.spans])


def test_the_worker_logs_no_export_failure(rig: dict[str, Any]) -> None:
    log = Path(rig["logs"]) / "worker.log"
    text = log.read_text(errors="replace")
    assert "Failed to export" not in text and "Traceback" not in text
