"""The worker's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for
probes. One port per worker, served by a daemon thread of the worker's main process.

- ``/metrics``: every pool process's samples, summed (multiprocess mode), and the fleet
  gauges of ``collector``.
- ``/healthz`` (liveness): 200 while the main process's vital parts (its loop, its reaper:
  ``worker.process.liveness``) run; 503 naming the part once one died (the process then exits).
- ``/readyz`` (readiness): 200 once Celery says the worker is ready (connected, consuming),
  503 before that, from the moment a warm shutdown begins, and once a vital part died.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from worker.observability.metrics.multiproc import forget_dead_processes
from worker.process import liveness

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

__all__ = ["MetricsServer", "Readiness"]

StartResponse = Callable[..., Any]


@dataclass
class Readiness:
    ready: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)

    def is_ready(self) -> bool:
        return self.ready.is_set() and not self.stopping.is_set() and not liveness.failures()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    # wsgiref prints every request to stderr: that would break one-JSON-event-per-line logs.
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    def __init__(
        self,
        *,
        directory: Path | None,
        readiness: Readiness,
        extra: Iterable[Collector] = (),
    ) -> None:
        # Imported here: prometheus-client is the optional [metrics] extra, and a worker
        # without it never builds a server (worker.observability.metrics.lifecycle.enabled).
        from prometheus_client import CollectorRegistry, make_wsgi_app
        from prometheus_client.multiprocess import MultiProcessCollector

        self.directory = directory
        self.readiness = readiness
        self.registry = CollectorRegistry()
        if directory is not None:
            MultiProcessCollector(self.registry, path=str(directory))
        else:
            from prometheus_client import REGISTRY

            self.registry = REGISTRY
        for collector in extra:
            self.registry.register(collector)
        self._metrics = make_wsgi_app(self.registry)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            dead = liveness.failures()
            if dead:
                named = "; ".join(f"{part}: {why}" for part, why in sorted(dead.items()))
                return _text(start_response, "503 Service Unavailable", f"dead: {named}\n")
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            if self.readiness.is_ready():
                return _text(start_response, "200 OK", "ready\n")
            return _text(start_response, "503 Service Unavailable", "not ready\n")
        if path in ("/", "/metrics"):
            if self.directory is not None:
                forget_dead_processes(self.directory)
            return self._metrics(environ, start_response)
        return _text(start_response, "404 Not Found", "not found\n")

    def bind(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (``port`` 0 picks a free one) and return the port bound;
        nothing is served until ``serve``. ``OSError`` when the port is taken."""
        self._server = make_server(
            host, port, self.app, server_class=_Server, handler_class=_QuietHandler
        )
        return int(self._server.server_port)

    def start(self, host: str, port: int) -> int:
        """``bind`` and ``serve`` at once (a process that forks no pool after); the port."""
        bound = self.bind(host, port)
        self.serve()
        return bound

    def serve(self) -> None:
        """Serve what ``bind`` listens on, in a daemon thread."""
        assert self._server is not None, "bind first"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="decisions-metrics", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            # Only once served: shutdown() waits for a loop that never ran.
            self._server.shutdown()
            self._thread = None
        self.close()

    def close(self) -> None:
        """Close the listening socket, serving thread or not: in a forked process the copy
        of a serving server has no thread, and its shutdown() would wait for ever."""
        if self._server is not None:
            self._server.server_close()
            self._server = None


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]
