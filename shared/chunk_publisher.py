"""Pipelined publishing: Celery messages go out on a thread while the caller validates on.

A producer's time per job is its validation (CPU) plus its share of one broker round trip
per message (waiting on a socket). ``ChunkPublisher`` overlaps the two: the caller hands
each full chunk to a bounded queue and validates the next; one thread publishes them in
order over one producer connection. A publishing error stops the thread and is raised to the
caller at its next ``put`` or when the block ends; chunks queued after it are never handed to
``send`` (so nothing of theirs was recorded anywhere).

``MessageSender`` is the client's ``send``: one chunk of jobs, one Celery message, each job's
intake recorded first (``shared.intake``) and withdrawn again if the publish raises; it keeps
which jobs' messages went out, for the caller's ``SubmitFailed``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import Any

from celery import Celery
from kombu.utils import json as kombu_json

from shared import keys
from shared.errors import SubmitFailed
from shared.intake import IntakeBook, member_job_id
from shared.submit_report import SubmitReport

__all__ = ["ChunkPublisher", "EncodedJobs", "MessageSender", "SplicingProducer"]

log = logging.getLogger(__name__)

Send = Callable[[Any, list[Any]], None]
_DONE = object()


class ChunkPublisher:
    def __init__(
        self,
        celery: Celery,
        send: Send,
        *,
        on_sent: Callable[[int], None] | None = None,
        depth: int = 16,
    ) -> None:
        self._celery = celery
        self._send = send
        self._on_sent = on_sent
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chunk-publisher", daemon=True)
        #: Set when the thread has stopped: waited for after a Ctrl-C, as ``Thread.join``
        #: interrupted by one marks the thread stopped while it runs on (CPython bpo-45274's
        #: fix), so a second join returns at once.
        self._stopped = threading.Event()
        #: Messages published so far.
        self.sent = 0

    def __enter__(self) -> ChunkPublisher:
        self._thread.start()
        return self

    def put(self, chunk: list[Any]) -> None:
        self._raise()
        self._queue.put(chunk)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        done = False
        try:
            self._queue.put(_DONE)
            done = True
            self._thread.join()
        except KeyboardInterrupt:
            # A Ctrl-C while the last messages handed to the thread go (every job validated):
            # they go all the same, so wait for them, or a count read now says fewer than the
            # broker holds (found by an attack: "3989 of 4000 queued", 3992 on the broker). A
            # second Ctrl-C stops this wait too.
            if not done:
                self._queue.put(_DONE)
            self._stopped.wait()
            raise
        if exc is None:
            self._raise()

    @property
    def error(self) -> BaseException | None:
        """What stopped the publishing thread (None: nothing); the caller's own errors are
        not this."""
        return self._error

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            with self._celery.producer_or_acquire() as producer:
                while True:
                    chunk = self._queue.get()
                    if chunk is _DONE:
                        return
                    if self._error is not None:
                        continue  # drain: the caller hears of the error, nothing more is sent
                    self._send(producer, chunk)
                    self.sent += 1
                    if self._on_sent is not None:
                        self._on_sent(len(chunk))
        except BaseException as error:
            self._error = error
            while self._queue.get() is not _DONE:  # let a blocked put() go on, then stop
                pass
        finally:
            self._stopped.set()


class MessageSender:
    """Publishes a chunk of (intake member, job JSON) pairs as one Celery message: the
    ``send`` of a ``ChunkPublisher`` (its thread only).

    Each job's intake is recorded before its message exists (``intake`` None: not a Redis
    broker, nothing recorded). When the publish raises, that message's records are withdrawn
    before the error goes on (best effort: if the intake Redis fails too, the log says so and
    the publish's error is the one raised), because the caller is told the submit failed and a
    reaper would otherwise republish jobs whose message the broker never held.

    The publish may also have raised *after* the broker took the message (a reply that never
    came back: a timeout, a connection dropped after the command was written). Those records
    are withdrawn all the same, and the jobs reported ``unconfirmed``: they may run, from that
    message. Keeping the records instead would make a reaper republish every failed publish's
    jobs, the refused connection's too (the reaper cannot tell a message never received from
    one the broker lost): the very jobs the producer was told failed would run minutes later.
    Withdrawn, an unconfirmed job runs at most from the message the broker may hold, and a
    producer that submits it again with the same id is safe, as the ledger runs an id once.
    What is lost is only the recovery of that one message if the broker took it and then lost
    it in kombu's pop window; the producer, told "unconfirmed", resubmits it.
    """

    def __init__(
        self, celery: Celery, intake: IntakeBook | None, headers: dict[str, str] | None
    ) -> None:
        self.celery = celery
        self.intake = intake
        self.headers = headers
        #: The intake members of the jobs in messages published, in order.
        self.queued: list[str] = []
        #: Those of the message whose publish raised (may have reached the broker).
        self.unconfirmed: list[str] = []

    def __call__(self, producer: Any, chunk: list[tuple[str, str]]) -> None:
        # The task id is ours, so that the intake record names its message before it exists.
        message_id = str(uuid.uuid4())
        if self.intake is not None:
            self.intake.record(chunk, message_id)  # raises: nothing recorded, nothing sent
        try:
            self.celery.send_task(
                keys.RUN_JOBS_TASK,
                kwargs={"jobs": EncodedJobs(body for _, body in chunk)},
                queue=keys.CELERY_QUEUE,
                task_id=message_id,
                producer=SplicingProducer(producer),
                # Given, so Celery does not saferepr the whole chunk into every message
                # (measured: 6% of a producer's time), and no job's content reaches a worker's
                # log line.
                argsrepr="()",
                kwargsrepr=f"{{'jobs': <{len(chunk)} jobs>}}",
                headers=self.headers,  # the submit's trace context (``traceparent``), if any
            )
        except BaseException:
            self.unconfirmed = [member for member, _ in chunk]
            self._withdraw(message_id)
            raise
        self.queued.extend(member for member, _ in chunk)

    def failure(self, report: SubmitReport) -> SubmitFailed:
        """What a submit that stopped on this sender's failure, with ``report`` so far (its
        ``job_ids``: every job validated, in order), queued and did not: the ids of messages
        published, of the one that raised, and the rest (never sent: buffered, queued behind
        it, or never put); and the rejections already on the stream."""
        queued = [member_job_id(member) for member in self.queued]
        unconfirmed = [member_job_id(member) for member in self.unconfirmed]
        # By count: one id may be in a batch twice (two reply streams), queued once.
        accounted = Counter([*queued, *unconfirmed])
        unsent = []
        for job_id in report.job_ids:
            if accounted[job_id] > 0:
                accounted[job_id] -= 1
            else:
                unsent.append(job_id)
        return SubmitFailed(
            queued, unconfirmed, unsent, list(report.rejected), list(report.rejected_lines)
        )

    def _withdraw(self, message_id: str) -> None:
        if self.intake is None:
            return
        try:
            self.intake.withdraw(self.unconfirmed, message_id)
        except Exception as exc:  # never instead of the publish's own error
            log.warning(
                "intake: could not withdraw the records of %d job(s) whose message was not "
                "published (%s: %s); a worker's reaper will republish them unless the "
                "ledger has them by then",
                len(self.unconfirmed),
                type(exc).__name__,
                exc,
            )


class EncodedJobs(list[str]):
    """A chunk's jobs as JSON texts, taken at validation: ``SplicingProducer`` puts them in
    the message body as they are instead of encoding every job a second time."""


class SplicingProducer:
    """A kombu producer for ``send_task`` that writes a chunk's JSON body itself.

    Celery hands ``publish`` the body ``[args, {"jobs": EncodedJobs}, embed]``; the jobs'
    texts are spliced into kombu's JSON for the rest, and the body goes out as
    ``application/json`` text, so the worker decodes the very message kombu would have
    written (measured: encoding the body was a third of the publishing thread). Any other
    body, or another serializer, is published as before with the jobs decoded back.
    Everything but ``publish`` is the wrapped producer's.
    """

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def publish(self, body: Any, **kwargs: Any) -> Any:
        jobs = _encoded_jobs(body)
        if jobs is None:
            return self._producer.publish(body, **kwargs)
        args, _, embed = body
        if kwargs.get("content_type") is None and kwargs.get("serializer") == "json":
            text = (
                f'[{kombu_json.dumps(args)}, {{"jobs": [{",".join(jobs)}]}}, '
                f"{kombu_json.dumps(embed)}]"
            )
            kwargs.update(content_type="application/json", content_encoding="utf-8")
            return self._producer.publish(text, **kwargs)
        decoded = (args, {"jobs": [json.loads(job) for job in jobs]}, embed)
        return self._producer.publish(decoded, **kwargs)


def _encoded_jobs(body: Any) -> EncodedJobs | None:
    """The encoded jobs of a protocol 2 body ``(args, {"jobs": ...}, embed)``, else None."""
    if not (isinstance(body, tuple | list) and len(body) == 3):
        return None
    kwargs = body[1]
    if not isinstance(kwargs, dict) or len(kwargs) != 1:
        return None
    jobs = kwargs.get("jobs")
    return jobs if isinstance(jobs, EncodedJobs) else None
