"""OpenTelemetry traces, for producers and workers alike; off unless an endpoint is set.

With ``DECISIONS_OTEL_ENDPOINT`` (or OpenTelemetry's own ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``shared.settings``) set, spans are exported over OTLP/HTTP to ``{endpoint}/v1/traces``: the
producer's submit, the Celery message (its W3C ``traceparent`` rides in the message headers,
``inject`` / ``continued``), the worker's task, one span per provider call
(``worker.observability.tracing``
says which attributes). No attribute ever holds a key, a state or a question.

Why the OpenTelemetry SDK and its OTLP/HTTP exporter rather than our own: they are the
ecosystem's reference implementation (batching, retries of exports, W3C propagation, the
collectors' wire format), kept by the project that writes the conventions. They are an
optional extra (``pip install decision-worker[otel]``): most deployments do not trace, and
the SDK and the OTLP exporter (with protobuf) take 0.1 to 0.4 s to import on a loaded 2-core
machine. Without them, or with no endpoint set, every function here is a no-op.

Off costs nothing: nothing of OpenTelemetry is imported by this project (redis-py 8 tries to
import it on its own when it is installed), and ``span()`` is one global read returning a
shared no-op context manager: measured side by side, as cheap as an empty ``with
contextlib.nullcontext()`` (3 µs each at a load of 10 on 2 cores; a span exported through
the SDK's batch processor cost about 340 µs there). ``tests/providers/test_tracing.py``
checks both. Whether tracing is on is decided once per process, at the first span (or
``configure``); a worker's pool process decides after its fork, so no exporter thread is
forked.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

from shared.settings import Settings, get_settings

__all__ = [
    "COMMAND_EXPORT_TIMEOUT_S",
    "EXCEPTION_TYPE",
    "NO_SPAN",
    "TRACES_PATH",
    "annotate",
    "configure",
    "continued",
    "enabled",
    "flush",
    "inject",
    "install",
    "span",
]

#: OTLP/HTTP's path for traces, appended to the endpoint (as the SDK does with the variable).
TRACES_PATH: Final = "/v1/traces"
#: A batch's export, retries included, from a command that exits once it has submitted.
COMMAND_EXPORT_TIMEOUT_S: Final = 2.0
#: The attribute naming the type of an exception that left a span (OpenTelemetry's name).
EXCEPTION_TYPE: Final = "exception.type"
_DEFAULT_SERVICE: Final = "decision-worker"

_lock = threading.Lock()
#: ``None``: not decided yet; ``False``: off; else the tracer.
_tracer: Any = None
_provider: Any = None
#: Whether ``_provider`` is ours (made by ``configure``), to shut down on ``install``.
_owned = False


class _NoSpan:
    """The span of tracing off: enters to ``None``, does nothing, shared by every caller."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN: Final = _NoSpan()


def configure(
    settings: Settings | None = None,
    *,
    service_name: str = _DEFAULT_SERVICE,
    export_timeout_s: float | None = None,
) -> bool:
    """Decide, once per process, whether to trace; True when spans are exported.

    No endpoint: off, nothing imported. An endpoint without the ``[otel]`` extra installed:
    off, with one warning line naming the extra. ``export_timeout_s`` bounds each batch's
    export, retries included (None: the SDK's, 10 s or ``OTEL_EXPORTER_OTLP_TIMEOUT``): a
    command that exits after a few spans passes ``COMMAND_EXPORT_TIMEOUT_S``, so that a
    collector that does not answer holds its exit that long, not ten seconds.
    """
    global _tracer, _provider, _owned
    if _tracer is not None:
        return _tracer is not False
    with _lock:
        if _tracer is not None:
            return _tracer is not False
        endpoint = (settings or get_settings()).otel_endpoint
        if not endpoint:
            _tracer = False
            return False
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            from shared.tracing_export import ReportingSpanExporter
        except ImportError:
            import logging

            logging.getLogger(__name__).warning(
                "DECISIONS_OTEL_ENDPOINT is set but OpenTelemetry is not installed: "
                "pip install 'decision-worker[otel]'; tracing is off"
            )
            _tracer = False
            return False
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        exporter = ReportingSpanExporter(
            endpoint.rstrip("/") + TRACES_PATH, timeout=export_timeout_s
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        _provider, _owned = provider, True
        _tracer = provider.get_tracer("decision-worker")
        return True


def install(provider: Any | None) -> None:
    """Trace with ``provider`` (an SDK ``TracerProvider``, e.g. with the in-memory exporter);
    ``None``: decide again from the settings at the next span. For tests and embedders.

    A provider ``configure`` made is shut down first (its last spans exported); one given
    here stays its owner's to shut down.
    """
    global _tracer, _provider, _owned
    with _lock:
        if _owned and _provider is not None:
            _provider.shutdown()
        _provider, _owned = provider, False
        _tracer = provider.get_tracer("decision-worker") if provider is not None else None


def enabled() -> bool:
    return (_tracer if _tracer is not None else configure()) is not False


def flush(timeout_s: float = 5.0) -> bool:
    """Export the spans still batched (before a process exits), waiting at most
    ``timeout_s``; True when they were handed over in time (or tracing is off).

    The SDK's ``force_flush`` ignores its timeout: it exports batch after batch, each
    waiting up to the exporter's own timeout (10 s by default), so a collector that accepts
    and never answers held a worker's shutdown 20 s for ``flush(5.0)``. It runs on a daemon
    thread here, which the caller stops waiting for; the spans it had not sent are lost
    with the process, as the collector's silence would lose them anyway.
    """
    provider = _provider
    if provider is None:
        return True
    done = threading.Event()

    def run() -> None:
        try:
            provider.force_flush(int(timeout_s * 1000))
        finally:
            done.set()

    threading.Thread(target=run, name="decisions-tracing-flush", daemon=True).start()
    return done.wait(timeout_s)


def span(
    name: str, *, kind: str = "internal", **attributes: Any
) -> contextlib.AbstractContextManager[Any]:
    """A span around a block, the current one inside it; ``None`` values are left out.

    Entered, it gives the span (``None`` when tracing is off); an exception leaving the
    block sets its status to error and ``EXCEPTION_TYPE`` to its type's name, never its
    message or stack (``_started``).
    """
    tracer = _tracer
    if tracer is None:
        configure()
        tracer = _tracer
    if tracer is False:
        return NO_SPAN
    return _started(tracer, name, kind, attributes)


@contextlib.contextmanager
def _started(tracer: Any, name: str, kind: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    # The SDK's default records an exception as an event with its message and stack, and
    # its text as the status description: a ledger DataError exported its SQL parameters
    # (parts of a job's state) and 12 kB of stack. Only the type's name is kept.
    with tracer.start_as_current_span(
        name,
        kind=SpanKind[kind.upper()],
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            named = _type_name(exc)
            current.set_attribute(EXCEPTION_TYPE, named)
            current.set_status(Status(StatusCode.ERROR, named))
            raise


def _type_name(exc: BaseException) -> str:
    """``ValueError``, or ``sqlalchemy.exc.DataError``: the exception's type, no more."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def annotate(target: Any = None, /, **attributes: Any) -> None:
    """Set attributes on ``target`` (a span from ``span()``), or on the current span when
    none is given; ``None`` values are left out. Nothing when tracing is off."""
    if _tracer is None or _tracer is False:
        return
    if target is None:
        from opentelemetry import trace

        target = trace.get_current_span()
    target.set_attributes(_clean(attributes))


def inject(carrier: dict[str, str]) -> dict[str, str]:
    """The current trace context into ``carrier`` (W3C ``traceparent``); unchanged when off."""
    if _tracer is None or _tracer is False:
        return carrier
    from opentelemetry import propagate

    propagate.inject(carrier)
    return carrier


def continued(carrier: Any) -> contextlib.AbstractContextManager[Any]:
    """The trace a message's headers carry, made current for the block (a no-op when off,
    or when the carrier has none). ``carrier`` is a mapping or an object with the headers
    as attributes (a Celery task's ``request``)."""
    if not enabled():
        return NO_SPAN
    traceparent = _header(carrier, "traceparent")
    if not isinstance(traceparent, str):
        return NO_SPAN
    headers = {"traceparent": traceparent}
    tracestate = _header(carrier, "tracestate")
    if isinstance(tracestate, str):
        headers["tracestate"] = tracestate
    return _attached(headers)


@contextlib.contextmanager
def _attached(headers: Mapping[str, str]) -> Iterator[None]:
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(headers))
    try:
        yield None
    finally:
        context.detach(token)


def _header(carrier: Any, name: str) -> Any:
    if isinstance(carrier, Mapping):
        return carrier.get(name)
    return getattr(carrier, name, None)


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}
