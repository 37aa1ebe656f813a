"""The embedded main job: a whole batch through a real Celery worker inside this process.

The broker is kombu's in-memory transport, the worker a solo-pool WorkController on a thread,
the ledger SQLite in the working directory and the replies an in-process sink; the tasks, the
runner and the ledger code are the fleet's own. Run twice on the same batch, the ledger
replays every stored outcome and nothing is sent again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery, signals
from celery.worker import WorkController

from shared import keys
from shared.client import Client
from shared.replies import TERMINAL_TYPES, parse_reply
from shared.settings import Settings
from worker import context
from worker.app import create_app
from worker.ledger import Ledger
from worker.sinks import MemorySink

__all__ = ["EmbeddedWorker", "RunSummary", "run_batch"]

#: kombu's memory transport polls; a second by default, far too slow for a batch.
MEMORY_POLLING_INTERVAL_S = 0.005
DEFAULT_REPLY_TO = "decisions:run"
#: How long stopping waits for the worker to act on its shutdown command.
SHUTDOWN_WAIT_S = 5.0


class _Controller(WorkController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.consumer_ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
        self.consumer_ready.set()


class EmbeddedWorker:
    """A real Celery worker (solo pool) consuming ``celery_app``'s broker on a thread."""

    def __init__(self, celery_app: Celery, *, start_timeout_s: float = 30.0) -> None:
        self.app = celery_app
        self.start_timeout_s = start_timeout_s
        self._thread: threading.Thread | None = None
        self._controller: _Controller | None = None

    def __enter__(self) -> EmbeddedWorker:
        self.app.finalize()
        # The solo pool resolves tasks through the default app on the worker's thread.
        self.app.set_current()
        self.app.set_default()
        self._controller = _Controller(
            app=self.app,
            pool="solo",
            concurrency=1,
            queues=[keys.CELERY_QUEUE],
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            loglevel="WARNING",
        )
        self._thread = threading.Thread(
            target=self._controller.start, name="embedded-worker", daemon=True
        )
        self._thread.start()
        if not self._controller.consumer_ready.wait(self.start_timeout_s):
            raise RuntimeError("the embedded Celery worker did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._controller is not None:
            self._shut_down_through_the_broker()
            self._controller.stop(in_sighandler=False, exitcode=0)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _shut_down_through_the_broker(self) -> None:
        # Stopped from outside, the worker notices only after its broker poll (2 s); a
        # shutdown command comes through the broker and ends its loop at once. The memory
        # broker is this process's own, so no other worker receives it.
        stopped = threading.Event()

        def on_shutdown(sender: Any = None, **_: Any) -> None:
            if getattr(sender, "app", None) is self.app:
                stopped.set()

        signals.worker_shutdown.connect(on_shutdown, weak=False)
        # Celery warns of a remote shutdown; this one is ours and routine.
        control_log = logging.getLogger("celery.worker.control")
        level = control_log.level
        control_log.setLevel(logging.ERROR)
        try:
            self.app.control.broadcast("shutdown")
            stopped.wait(SHUTDOWN_WAIT_S)
        finally:
            signals.worker_shutdown.disconnect(on_shutdown)
            control_log.setLevel(level)


@dataclass
class RunSummary:
    jobs: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    escalation_reasons: Counter[str] = field(default_factory=Counter)
    requests_sent: int = 0
    cost_usd_this_run: float = 0.0
    cost_usd_total: float = 0.0
    cost_unknown_calls: int = 0
    outputs: dict[str, Path] = field(default_factory=dict)


def embedded_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"broker_url": "memory://localhost/"})


def run_batch(
    lines: Iterable[Any],
    *,
    settings: Settings,
    out_dir: Path,
    on_progress: Callable[[int, int], None] | None = None,
    default_reply_to: str = DEFAULT_REPLY_TO,
    timeout_s: float | None = None,
    pack: bool = False,
) -> RunSummary:
    """Submit ``lines`` (job objects) to an embedded worker and wait for every terminal message
    (``pack``: as ``Client.submit_batch``)."""
    settings = embedded_settings(settings)
    Ledger.from_settings(settings).migrate()
    sink = MemorySink()
    context.configure(settings=settings, sink=sink)
    celery_app = create_app(
        settings, broker_transport_options={"polling_interval": MEMORY_POLLING_INTERVAL_S}
    )
    client = Client(settings, celery_app=celery_app, publisher=sink)
    jobs = [_with_reply_to(line, default_reply_to) for line in lines]
    started = time.monotonic()
    with EmbeddedWorker(celery_app):
        report = client.submit_batch(jobs, pack=pack)
        # Rejections at submit are already in the sink; wait for every queued job's message.
        expected = set(report.job_ids)
        while True:
            done = expected & {m.job_id for m in sink.snapshot() if m.type in TERMINAL_TYPES}
            if on_progress:
                on_progress(len(done), len(expected))
            if done >= expected:
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{len(expected - done)} job(s) without a terminal message")
            time.sleep(0.05)
    stats = context.current().runner.stats
    summary = _summarise(sink, out_dir)
    summary.requests_sent = stats.requests_sent
    summary.cost_usd_this_run = stats.cost_usd
    return summary


def _with_reply_to(line: Any, default_reply_to: str) -> Any:
    if isinstance(line, dict) and "reply_to" not in line:
        return {**line, "reply_to": default_reply_to}
    return line


def _summarise(sink: MemorySink, out_dir: Path) -> RunSummary:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = RunSummary()
    files = {
        "result": out_dir / "results.jsonl",
        "escalation": out_dir / "escalations.jsonl",
        "rejected": out_dir / "rejected.jsonl",
    }
    handles = {kind: path.open("w", encoding="utf-8") for kind, path in files.items()}
    try:
        seen: set[tuple[str, str]] = set()
        # Sorted by job id, so two runs of the same batch write the same files in the same order.
        for message in sorted(sink.snapshot(), key=lambda m: (m.job_id, m.type)):
            if (message.job_id, message.type) in seen:
                continue
            seen.add((message.job_id, message.type))
            reply = parse_reply(message.message)
            summary.jobs += 1
            summary.by_type[reply.type] += 1
            if reply.type == "escalation":
                summary.escalation_reasons[reply.reason] += 1
            for receipt in reply.receipts:
                if receipt.provider == "handler":
                    continue  # a menu's handler or tool run: no paid request, no cost
                if receipt.cost_usd is None:
                    summary.cost_unknown_calls += receipt.status in ("answered", "unknown")
                else:
                    summary.cost_usd_total += receipt.cost_usd
            handles[reply.type].write(
                json.dumps(json.loads(message.message), sort_keys=True) + "\n"
            )
    finally:
        for handle in handles.values():
            handle.close()
    summary.outputs = files
    return summary
