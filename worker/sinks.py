"""Where terminal messages go: Redis streams in a fleet, memory when embedded."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from shared.streams import RedisPublisher, ReplyPublisher

__all__ = ["MemorySink", "PublishedMessage", "RedisPublisher", "ReplySink"]

ReplySink = ReplyPublisher


@dataclass(frozen=True)
class PublishedMessage:
    stream: str
    job_id: str
    type: str
    message: str
    escalation: bool


class MemorySink:
    """The embedded run's streams: the same publish-once rule, kept in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._markers: set[tuple[str, str]] = set()
        self.messages: list[PublishedMessage] = []

    def publish(
        self,
        *,
        stream: str,
        job_id: str,
        message_type: str,
        message_json: str,
        escalation: bool,
        marker: str | None = None,
    ) -> bool:
        with self._lock:
            key = (stream, marker or job_id)
            if key in self._markers:
                return False
            self._markers.add(key)
            self.messages.append(
                PublishedMessage(stream, job_id, message_type, message_json, escalation)
            )
            return True

    def snapshot(self) -> list[PublishedMessage]:
        with self._lock:
            return list(self.messages)
