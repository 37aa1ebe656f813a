"""The embedded main job: a whole batch through a real Celery worker inside this process.

The broker is kombu's in-memory transport, the worker a solo-pool WorkController on a thread,
the ledger SQLite in the working directory and the replies an in-process sink; the tasks, the
runner and the ledger code are the fleet's own. Run twice on the same batch, the ledger
replays every stored outcome and nothing is sent again.

``at_the_faux`` points every provider and chat runtime at the faux (``decisions run`` does,
unless ``--live``), so a batch naming ``parallel`` or ``openrouter`` is answered on this
machine, with placeholder keys, whatever keys the environment holds.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery, signals
from celery.worker import WorkController

from shared import keys
from shared.client import Client
from shared.replies import TERMINAL_TYPES, parse_reply
from shared.settings import Settings
from worker.delivery.sinks import MemorySink
from worker.ledger import Ledger
from worker.process import context

__all__ = ["EmbeddedWorker", "RunSummary", "at_the_faux", "run_batch"]

#: kombu's memory transport polls; a second by default, far too slow for a batch.
MEMORY_POLLING_INTERVAL_S = 0.005
DEFAULT_REPLY_TO = "decisions:run"
#: How long stopping waits for the worker to act on its shutdown command.
SHUTDOWN_WAIT_S = 5.0
#: How long a failed run waits for its worker's thread (a daemon) before it ends anyway.
FAILED_STOP_WAIT_S = 2.0


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

    def __exit__(self, kind: object, *exc: object) -> None:
        # Ctrl-C stops warm, as a worker's first one does: requests in flight get their
        # answers recorded (cut off, each would escalate decision_interrupted next run).
        failed = isinstance(kind, type) and not issubclass(kind, KeyboardInterrupt | SystemExit)
        if self._controller is not None and failed:
            # The run failed (a ledger no wait mends): a cold stop, as a second Ctrl-C gives
            # a worker, and no wait for jobs holding an answer through the outage (up to
            # RECORD_GRACE_S: the run looked hung for half a minute). Nothing is lost: what
            # they hold was claimed first, and the next run books it.
            self._controller.terminate(in_sighandler=False)
        elif self._controller is not None:
            self._shut_down_through_the_broker()
            self._controller.stop(in_sighandler=False, exitcode=0)
        if self._thread is not None:
            self._thread.join(timeout=FAILED_STOP_WAIT_S if failed else 30)

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
    #: Of ``by_type["rejected"]``, the lines the Client refused before queueing them.
    rejected_at_submit: int = 0
    outputs: dict[str, Path] = field(default_factory=dict)


def embedded_settings(settings: Settings) -> Settings:
    # The embedded run asks for the faux explicitly: a batch naming no provider is answered
    # on this machine (``decisions run --live`` too, for the jobs that rely on the default).
    return settings.model_copy(
        update={"broker_url": "memory://localhost/", "faux_in_process": True}
    )


@contextmanager
def at_the_faux(settings: Settings) -> Iterator[tuple[Settings, str]]:
    """``settings`` with every provider, System One host, chat runtime and chat host at the
    faux, and ``(settings, faux URL)``: the ``decisions faux serve`` at ``faux_url`` if one is
    set, else a faux of this process on a loopback port. While inside, every key variable
    holds a placeholder (a real key is never sent, not even to the faux) and nothing is
    recorded (``decisions record``: the faux's made-up answers are never saved as real)."""
    # Imported here: the fakes load only when asked for (a production worker never is).
    from worker.providers.observers import recording_paused
    from worker.testing.handles import provider_urls
    from worker.testing.live import PLACEHOLDER_KEY, key_variables

    with _faux_server(settings) as url, recording_paused():
        update: dict[str, Any] = dict(provider_urls(url))
        update["systemone_hosts"] = {
            name: host.model_copy(update={"base_url": url})
            for name, host in settings.systemone_hosts.items()
        }
        # The faux answers chat completions on OpenAI's path (and OpenRouter's).
        update["chat_hosts"] = {
            name: host.model_copy(update={"base_url": url, "path": "/v1/chat/completions"})
            for name, host in settings.chat_hosts.items()
        }
        variables = {v for v in key_variables(settings).values() if v}
        variables |= {h.key_env for h in settings.chat_hosts.values() if h.key_env}
        saved = {name: os.environ.get(name) for name in variables}
        os.environ.update(dict.fromkeys(variables, PLACEHOLDER_KEY))
        try:
            yield settings.model_copy(update=update), url
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@contextmanager
def _faux_server(settings: Settings) -> Iterator[str]:
    if settings.faux_url:
        yield settings.faux_url.rstrip("/")
        return
    from worker.testing.faux import FauxBehaviour, FauxServer

    with FauxServer(behaviour=FauxBehaviour(latency_ms=settings.faux_latency_ms)) as server:
        yield server.url


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
    # Imported here: worker.app reads the settings as it loads, and the command that imports
    # this module must be able to report bad settings itself.
    from worker.app import create_app

    settings = embedded_settings(settings)
    Ledger.from_settings(settings).migrate()
    sink = MemorySink()
    context.configure(settings=settings, sink=sink)
    # Built here, before the worker: a setting that stops every task (an unknown default
    # provider, a handler module that does not import) fails the run at once, by its name.
    context.current()
    celery_app = create_app(
        settings, broker_transport_options={"polling_interval": MEMORY_POLLING_INTERVAL_S}
    )
    client = Client(settings, celery_app=celery_app, publisher=sink)
    jobs = [_with_reply_to(line, default_reply_to) for line in lines]
    started = time.monotonic()
    failures: list[BaseException] = []

    def on_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        if getattr(sender, "app", None) is celery_app and exception is not None:
            failures.append(exception)

    # A task that fails leaves its jobs without a message: waiting for them would never end.
    signals.task_failure.connect(on_failure, weak=False)
    try:
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
                if failures:
                    raise failures[0]
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    raise TimeoutError(f"{len(expected - done)} job(s) without a terminal message")
                time.sleep(0.05)
    finally:
        signals.task_failure.disconnect(on_failure)
    stats = context.current().runner.stats
    summary = _summarise(sink, out_dir)
    summary.requests_sent = stats.requests_sent
    summary.rejected_at_submit = report.rejected_count
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
