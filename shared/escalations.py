"""The reviewers' queue: the escalation stream read through one consumer group.

Every new escalation is first delivered to the group's ``queue`` consumer (waiting for a
reviewer). A reviewer claims one by moving it, atomically, from ``queue`` (or from a reviewer
silent for longer than the idle time) to their own name; releasing moves it back; resolving
publishes the checked answer as a ``resolution`` on the job's reply stream and acknowledges
the entry, so it leaves the queue for good. Two reviewers never hold the same escalation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from shared import keys
from shared.errors import EscalationNotFound
from shared.replies import EscalationMessage, ResolutionMessage, parse_reply
from shared.resolutions import MenuAnswerChecker, check_resolution
from shared.streams import publish_once

__all__ = ["QUEUE_CONSUMER", "EscalationQueue", "OpenEscalation"]

#: The group's consumer that holds every escalation no reviewer holds.
QUEUE_CONSUMER = "queue"

# Move an entry to ARGV[1] only if it is held by the queue, or by someone idle past ARGV[2] ms.
_TAKE = """
local item = redis.call('XPENDING', KEYS[1], ARGV[3], ARGV[4], ARGV[4], '1')[1]
if not item then return -1 end
if item[2] == ARGV[5] or tonumber(item[3]) >= tonumber(ARGV[2]) then
  redis.call('XCLAIM', KEYS[1], ARGV[3], ARGV[1], '0', ARGV[4])
  return 1
end
return 0
"""

# Move an entry held by ARGV[4] back to the queue consumer.
_GIVE_BACK = """
local item = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], '1')[1]
if not item then return -1 end
if item[2] ~= ARGV[4] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], '0', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class OpenEscalation:
    """An escalation still open: who holds it (None: waiting) and for how long."""

    entry_id: str
    message: EscalationMessage
    reply_to: str
    holder: str | None
    idle_s: float

    @property
    def age_s(self) -> float:
        return (datetime.now(UTC) - self.message.created_at).total_seconds()


class EscalationQueue:
    def __init__(
        self,
        client: redis.Redis,
        *,
        stream: str = keys.ESCALATION_STREAM,
        group: str = keys.ESCALATION_GROUP,
        claim_idle_s: float = 900.0,
        marker_ttl_s: int = 7 * 24 * 3600,
        menu_checker: MenuAnswerChecker | None = None,
    ) -> None:
        self.redis = client
        self.stream = stream
        self.group = group
        self.claim_idle_ms = int(claim_idle_s * 1000)
        self.marker_ttl_s = marker_ttl_s
        self.menu_checker = menu_checker
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)

    # --- reading -----------------------------------------------------------------------
    def _sync(self) -> None:
        """Create the group if needed and hand every new entry to the queue consumer."""
        try:
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        while True:
            got: Any = self.redis.xreadgroup(
                self.group, QUEUE_CONSUMER, {self.stream: ">"}, count=1000
            )
            if not got or not got[0][1]:
                return

    def open(self, *, reason: str | None = None, batch: str | None = None) -> list[OpenEscalation]:
        """Every open escalation, oldest first, optionally of one reason or batch."""
        self._sync()
        pending: Any = self.redis.xpending_range(self.stream, self.group, "-", "+", 1_000_000)
        # One round trip for every entry's body, not one per entry.
        pipe = self.redis.pipeline(transaction=False)
        for item in pending:
            entry_id = _text(item["message_id"])
            pipe.xrange(self.stream, min=entry_id, max=entry_id)
        bodies: list[Any] = pipe.execute() if pending else []
        found = []
        for item, rows in zip(pending, bodies, strict=True):
            entry_id = _text(item["message_id"])
            entry = _decode(rows)
            if entry is None:
                continue
            message, reply_to = entry
            if (reason and message.reason != reason) or (batch and message.batch != batch):
                continue
            holder = _text(item["consumer"])
            found.append(
                OpenEscalation(
                    entry_id=entry_id,
                    message=message,
                    reply_to=reply_to,
                    holder=None if holder == QUEUE_CONSUMER else holder,
                    idle_s=int(item["time_since_delivered"]) / 1000,
                )
            )
        return found

    def get(self, entry_id: str) -> OpenEscalation:
        for item in self.open():
            if item.entry_id == entry_id:
                return item
        raise EscalationNotFound(f"no open escalation {entry_id}")

    # --- a reviewer's moves --------------------------------------------------------------
    def claim(
        self, reviewer: str, *, reason: str | None = None, batch: str | None = None
    ) -> OpenEscalation | None:
        """Take the oldest waiting escalation (or one a silent reviewer let lapse)."""
        _check_reviewer(reviewer)
        for item in self.open(reason=reason, batch=batch):
            claimable = item.holder is None or item.idle_s * 1000 >= self.claim_idle_ms
            if item.holder == reviewer or not claimable:
                continue
            taken = self._take(
                keys=[self.stream],
                args=[reviewer, self.claim_idle_ms, self.group, item.entry_id, QUEUE_CONSUMER],
            )
            if taken == 1:
                return OpenEscalation(item.entry_id, item.message, item.reply_to, reviewer, 0.0)
        return None

    def claim_entry(self, entry_id: str, reviewer: str) -> OpenEscalation:
        """Take this one escalation (a reviewer opened it); ``EscalationNotFound`` if it is
        closed or held by someone else who is not past the idle time."""
        _check_reviewer(reviewer)
        item = self.get(entry_id)
        if item.holder == reviewer:
            return item
        taken = self._take(
            keys=[self.stream],
            args=[reviewer, self.claim_idle_ms, self.group, entry_id, QUEUE_CONSUMER],
        )
        if taken != 1:
            raise EscalationNotFound(f"{entry_id} is held by {item.holder or 'another reviewer'}")
        return OpenEscalation(entry_id, item.message, item.reply_to, reviewer, 0.0)

    def release(self, entry_id: str, reviewer: str) -> None:
        """Give an escalation back to the queue for another reviewer."""
        done = self._give_back(
            keys=[self.stream], args=[self.group, entry_id, QUEUE_CONSUMER, reviewer]
        )
        if done != 1:
            raise EscalationNotFound(f"{reviewer} holds no open escalation {entry_id}")

    def resolve(self, entry_id: str, reviewer: str, answer: Any) -> ResolutionMessage:
        """Check ``answer``, publish it as the job's resolution, close the escalation."""
        item = self.get(entry_id)
        if item.holder != reviewer:
            holder = item.holder or "nobody"
            raise EscalationNotFound(
                f"{entry_id} is held by {holder}, not {reviewer}: claim it first"
            )
        resolved = check_resolution(item.message, answer, menu_checker=self.menu_checker)
        resolution = ResolutionMessage(
            job_id=item.message.job_id,
            batch=item.message.batch,
            metadata=item.message.metadata,
            reason=item.message.reason,
            answer=resolved,
            reviewer=reviewer,
        )
        publish_once(
            self.redis,
            stream=item.reply_to,
            job_id=item.message.job_id,
            message_type="resolution",
            message_json=resolution.to_json(),
            marker=f"resolution:{item.message.job_id}",
            ttl_s=self.marker_ttl_s,
        )
        self.redis.xack(self.stream, self.group, entry_id)
        return resolution


def _check_reviewer(reviewer: str) -> None:
    if not reviewer or reviewer == QUEUE_CONSUMER:
        raise ValueError(f"reviewer name {reviewer!r} is reserved or empty")


def _decode(rows: Any) -> tuple[EscalationMessage, str] | None:
    """An escalation stream entry's message and the reply stream it came from."""
    if not rows:
        return None
    fields = {_text(k): _text(v) for k, v in rows[0][1].items()}
    message = parse_reply(fields["message"])
    if not isinstance(message, EscalationMessage):
        return None
    return message, fields.get("reply_to") or message.reply_to or ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
