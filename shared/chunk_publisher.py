"""Pipelined publishing: Celery messages go out on a thread while the caller validates on.

A producer's time per job is its validation (CPU) plus its share of one broker round trip
per message (waiting on a socket). ``ChunkPublisher`` overlaps the two: the caller hands
each full chunk to a bounded queue and validates the next; one thread publishes them in
order over one producer connection. A publishing error stops the thread and is raised to the
caller at its next ``put`` or when the block ends; chunks queued after it are not sent.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from celery import Celery
from kombu.utils import json as kombu_json

__all__ = ["ChunkPublisher", "EncodedJobs", "SplicingProducer"]

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
        self._queue.put(_DONE)
        self._thread.join()
        if exc is None:
            self._raise()

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
                f'[{kombu_json.dumps(args)}, {{"jobs": [{", ".join(jobs)}]}}, '
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
