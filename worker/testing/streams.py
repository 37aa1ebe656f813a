"""``ReplyStream``: reading the in-process worker's reply streams the way ``Client.replies``
reads Redis: in publish order, each job's terminal message once, resolutions on request."""

from __future__ import annotations

from shared import keys
from shared.replies import (
    TERMINAL_TYPES,
    EscalationMessage,
    RejectedMessage,
    Reply,
    ResultMessage,
    parse_reply,
)
from worker.delivery.sinks import MemorySink

__all__ = ["ReplyStream"]


class ReplyStream:
    """The messages a worker published to its memory streams."""

    def __init__(self, sink: MemorySink, *, default_stream: str | None = None) -> None:
        self._sink = sink
        self.default_stream = default_stream

    def streams(self) -> list[str]:
        """Every stream that got a message, in the order they first did."""
        return list(dict.fromkeys(m.stream for m in self._sink.snapshot()))

    def read(self, stream: str | None = None, *, include_resolutions: bool = False) -> list[Reply]:
        """``stream``'s messages (the default reply stream if none; ``"*"`` for every one)."""
        name = stream or self.default_stream
        seen: set[tuple[str, str]] = set()
        out: list[Reply] = []
        for message in self._sink.snapshot():
            if name not in (None, "*") and message.stream != name:
                continue
            wanted = message.type in TERMINAL_TYPES or (
                include_resolutions and message.type == "resolution"
            )
            if not wanted or (message.job_id, message.type) in seen:
                continue
            seen.add((message.job_id, message.type))
            out.append(parse_reply(message.message))
        return out

    def results(self, stream: str | None = None) -> list[ResultMessage]:
        return [m for m in self.read(stream) if isinstance(m, ResultMessage)]

    def rejected(self, stream: str | None = None) -> list[RejectedMessage]:
        return [m for m in self.read(stream) if isinstance(m, RejectedMessage)]

    def escalations(self) -> list[EscalationMessage]:
        """What went to the escalation stream (``decisions:escalations``), from every job."""
        seen: set[str] = set()
        out: list[EscalationMessage] = []
        for message in self._sink.snapshot():
            if not message.escalation or message.job_id in seen:
                continue
            seen.add(message.job_id)
            reply = parse_reply(message.message)
            assert isinstance(reply, EscalationMessage)
            out.append(reply)
        return out

    def of(self, job_id: str) -> Reply | None:
        """``job_id``'s terminal message, on whichever stream it went."""
        for reply in self.read("*"):
            if reply.job_id == job_id:
                return reply
        return None

    @property
    def escalation_stream(self) -> str:
        return keys.ESCALATION_STREAM
