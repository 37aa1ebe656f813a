"""``DecisionsWorker``: the fleet's own worker inside a test, on a memory broker and a
temporary SQLite ledger, with ``submit(jobs) -> replies``.

Built on ``worker.embedded`` (a real Celery worker, solo pool, on a thread): the tasks, the
runner, the ledger and the providers are the production ones; only the broker (kombu's
memory transport) and the reply streams (memory, ``ReplyStream`` reads them) stay in the
process. ``submit`` returns once every job has its terminal message *and* every Celery
message it sent has been processed, so a job submitted again (which the ledger answers
from its stored outcome, sending nothing) is finished too before the test looks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any, ClassVar

from celery import Celery, signals

from shared.client import Client
from shared.replies import TERMINAL_TYPES, Reply, parse_reply
from shared.settings import Settings
from shared.streams import Publication
from worker.app import create_app
from worker.delivery.sinks import MemorySink
from worker.embedded import MEMORY_POLLING_INTERVAL_S, EmbeddedWorker, embedded_settings
from worker.ledger import Ledger
from worker.process import context

__all__ = ["DEFAULT_REPLY_TO", "DecisionsWorker", "NotifyingSink"]

DEFAULT_REPLY_TO = "decisions:test"


class NotifyingSink(MemorySink):
    """The memory streams, with a condition to wait on instead of polling."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def publish(self, item: Publication) -> bool:
        added = super().publish(item)
        with self.changed:
            self.changed.notify_all()
        return added


def _job_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else getattr(raw, "id", None)
    return value if isinstance(value, str) and value else None


class DecisionsWorker:
    """A started in-process worker; use as a context manager (the fixture does). One at a
    time in a process: the worker context (``worker.process.context``) is the process's."""

    _running: ClassVar[DecisionsWorker | None] = None

    def __init__(self, settings: Settings, *, reply_to: str = DEFAULT_REPLY_TO) -> None:
        self.settings = embedded_settings(settings)
        self.reply_to = reply_to
        self.sink = NotifyingSink()
        self.app: Celery | None = None
        self.client: Client | None = None
        self._worker: EmbeddedWorker | None = None
        self._tasks_done = 0
        self._messages_sent = 0

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> DecisionsWorker:
        if DecisionsWorker._running is not None:
            raise RuntimeError(
                "another DecisionsWorker is running in this process (the worker context is "
                "per process): stop it first"
            )
        ledger = Ledger.from_settings(self.settings)
        ledger.migrate()
        ledger.dispose()
        context.configure(settings=self.settings, sink=self.sink)
        self.app = create_app(
            self.settings, broker_transport_options={"polling_interval": MEMORY_POLLING_INTERVAL_S}
        )
        self.client = Client(self.settings, celery_app=self.app, publisher=self.sink)
        signals.task_postrun.connect(self._task_done, weak=False)
        self._worker = EmbeddedWorker(self.app).__enter__()
        DecisionsWorker._running = self
        return self

    def __exit__(self, *exc: object) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            worker.__exit__(*exc)
        finally:
            DecisionsWorker._running = None
            signals.task_postrun.disconnect(self._task_done)
            # The next worker (the next test) builds its own providers, ledger and sink.
            context.configure()

    def _task_done(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not self.app:
            return
        with self.sink.changed:
            self._tasks_done += 1
            self.sink.changed.notify_all()

    # --- submitting ------------------------------------------------------------------------
    def submit(
        self,
        jobs: Iterable[Any],
        *,
        reply_to: str | None = None,
        timeout_s: float = 60.0,
    ) -> dict[str, Reply]:
        """Submit ``jobs`` (dicts or ``Job`` models) and wait for each terminal message.

        Returns job id -> its ``result``, ``escalation`` or ``rejected`` message, in the order
        the jobs were given (a line without an id is under the ``invalid-...`` id its
        rejection got). A job without ``reply_to`` gets ``reply_to`` (default
        ``decisions:test``). ``TimeoutError`` names the jobs still without a reply.
        """
        if self.client is None:
            raise RuntimeError("the worker is not started: use it as a context manager")
        stream = reply_to or self.reply_to
        given = [
            {**raw, "reply_to": stream} if isinstance(raw, dict) and "reply_to" not in raw else raw
            for raw in jobs
        ]
        published_before = len(self.sink.snapshot())
        report = self.client.submit_batch(given)
        # A line rejected at submit may have no usable id: its message names the one it got.
        rejected_now = [
            m.job_id for m in self.sink.snapshot()[published_before:] if m.type == "rejected"
        ]
        with self.sink.changed:
            self._messages_sent += report.messages
        given_ids = [job_id for job_id in map(_job_id, given) if job_id is not None]
        wanted = list(dict.fromkeys([*given_ids, *report.job_ids, *rejected_now]))
        give_up = time.monotonic() + timeout_s
        with self.sink.changed:
            while True:
                replies = self._terminal(wanted)
                if len(replies) == len(wanted) and self._tasks_done >= self._messages_sent:
                    return replies
                left = give_up - time.monotonic()
                if left <= 0:
                    missing = [job_id for job_id in wanted if job_id not in replies]
                    raise TimeoutError(
                        f"no terminal message after {timeout_s:g} s for: {', '.join(missing)}"
                        if missing
                        else f"the worker did not finish its tasks within {timeout_s:g} s"
                    )
                self.sink.changed.wait(left)

    def _terminal(self, wanted: list[str]) -> dict[str, Reply]:
        first: dict[str, str] = {}
        for message in self.sink.snapshot():
            if message.type in TERMINAL_TYPES:
                first.setdefault(message.job_id, message.message)
        return {job_id: parse_reply(first[job_id]) for job_id in wanted if job_id in first}
