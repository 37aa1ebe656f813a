"""Where terminal messages go when embedded: memory (a fleet publishes to Redis streams,
``shared.streams.RedisPublisher``; both are ``shared.streams.ReplyPublisher``s)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from shared.streams import Publication

__all__ = ["MemorySink", "PublishedMessage"]


@dataclass(frozen=True)
class PublishedMessage:
    stream: str
    job_id: str
    type: str
    message: str
    escalation: bool


class MemorySink:
    """The embedded run's streams: the same publish-once rules, kept in this process (a
    reply once per stream and marker, an escalation on the escalation stream once per job).
    ``escalation`` is True on the message that went to the escalation stream too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._markers: set[tuple[str, str, str]] = set()
        self._escalated: set[str] = set()
        self.messages: list[PublishedMessage] = []
        #: Audit escalations of results (``shared.labels``): escalation stream only.
        self.audits: list[PublishedMessage] = []

    def publish(self, item: Publication) -> bool:
        stream, job_id, marker = item.stream, item.job_id, item.marker
        with self._lock:
            key = (stream, "job", job_id) if marker is None else (stream, "marker", marker)
            if key in self._markers:
                return False
            self._markers.add(key)
            to_escalations = item.escalation and job_id not in self._escalated
            if to_escalations:
                self._escalated.add(job_id)
            self.messages.append(
                PublishedMessage(
                    stream, job_id, item.message_type, item.message_json, to_escalations
                )
            )
            if item.audit_json is not None and job_id not in self._escalated:
                # The result on its stream, its audit on the escalation stream only.
                self._escalated.add(job_id)
                audit = PublishedMessage("", job_id, "escalation", item.audit_json, True)
                self.audits.append(audit)
            return True

    def snapshot(self) -> list[PublishedMessage]:
        with self._lock:
            return list(self.messages)
