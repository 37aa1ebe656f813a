"""Observability: the runner's observer seam, Prometheus metrics and OpenTelemetry spans."""

__all__ = [
    "metrics",
    "observer",
    "tracing",
]
