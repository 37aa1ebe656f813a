"""The OTLP/HTTP span exporter, saying in one line of ours when the collector does not take
spans (imported by ``shared.tracing`` only when tracing is on: it needs the ``[otel]`` extra).

The SDK's exporter logs each attempt ("Transient error ... retrying in 1.00s", then "Failed to
export spans batch ...") in its own words, on a logger no one configured, and retries each
batch until its timeout (10 s by default). With the collector down, ``decisions submit`` took
8 s longer and printed four such lines. Here the SDK's lines are left out and a failed batch
is one warning naming ``DECISIONS_OTEL_ENDPOINT``, at most once a minute; a short-lived
command passes a shorter timeout (``shared.tracing.configure``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

__all__ = ["FAILURE_EVERY_S", "ReportingSpanExporter"]

#: A collector that stays down is reported again after this long, not on every batch.
FAILURE_EVERY_S: Final = 60.0
#: The SDK's exporter logs its attempts here (``OTLPSpanExporter``'s module).
_SDK_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"

log = logging.getLogger("decisions.tracing")


class ReportingSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` whose failures are one line of ours, at most once a minute."""

    def __init__(self, endpoint: str, *, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(endpoint=endpoint, timeout=timeout, **kwargs)
        logging.getLogger(_SDK_LOGGER).setLevel(logging.CRITICAL)
        self._where = endpoint
        self._lock = threading.Lock()
        self._reported_at: float | None = None
        self._dropped = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        result = super().export(spans)
        if result is SpanExportResult.FAILURE:
            self._failed(len(spans))
        return result

    def _failed(self, spans: int) -> None:
        with self._lock:
            self._dropped += spans
            now = time.monotonic()
            if self._reported_at is not None and now - self._reported_at < FAILURE_EVERY_S:
                return
            self._reported_at, dropped, self._dropped = now, self._dropped, 0
        log.warning(
            "tracing: the collector at %s did not take %d span(s); they are dropped. "
            "Check that it answers, or unset DECISIONS_OTEL_ENDPOINT to trace nothing",
            self._where,
            dropped,
        )
