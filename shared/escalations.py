"""The reviewers' queue: the escalation stream read through one consumer group.

Every new escalation is first delivered to the group's ``queue`` consumer (waiting for a
reviewer). A reviewer claims one by moving it, atomically, from ``queue`` (or from a reviewer
silent for longer than the idle time) to their own name; releasing moves it back. Resolving
is one Lua call: unless the job's resolved record exists, and only while the reviewer still
holds the entry, it appends the checked answer as a ``resolution`` to the job's reply stream,
writes the resolved record (who, when by Redis's clock, which entry), appends the labels
the answer makes of the machine's answers to the label stream (``shared.labels``: a worker
stores them in the ledger, so a reviewer's process needs no ledger; an entry with no label,
when the machine gave no answer, still tells the ledger the job was resolved) and
acknowledges the entry. An ``audit`` (a result sampled for review) publishes no resolution:
the job's result went out already; its answer is a label and an audit log entry. Two
reviewers never hold the same escalation, and a job is resolved at most once: a second
resolve is refused naming who resolved it and when.

An entry that does not parse (a field a newer version adds, a damaged message) is skipped
and reported (``shared.escalation_entries``; ``on_skip``, by default a warning log line
naming the entry), never an error for every reviewer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import redis

from shared import audit, keys
from shared.errors import AlreadyResolved, EscalationNotFound, PublishFailed
from shared.escalation_entries import OpenEscalation, SkipReporter, decode_entry
from shared.escalation_scripts import GIVE_BACK, RESOLVE, TAKE
from shared.escalation_unreadable import forget_unreadable, note_unreadable
from shared.labels import AUDIT_REASON, encode, labels_of
from shared.replies import ResolutionMessage
from shared.resolutions import MenuAnswerChecker, check_resolution

__all__ = ["QUEUE_CONSUMER", "EscalationQueue", "OpenEscalation", "SkipReporter"]

log = logging.getLogger(__name__)

#: The group's consumer that holds every escalation no reviewer holds.
QUEUE_CONSUMER = "queue"

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
        on_skip: SkipReporter | None = None,
        label_stream: str = keys.LABEL_STREAM,
    ) -> None:
        self.redis = client
        self.stream = stream
        self.label_stream = label_stream
        self.group = group
        self.claim_idle_ms = int(claim_idle_s * 1000)
        self.marker_ttl_s = marker_ttl_s
        self.menu_checker = menu_checker
        self.on_skip: SkipReporter = on_skip or _log_skip
        self._take = client.register_script(TAKE)
        self._give_back = client.register_script(GIVE_BACK)
        self._resolve = client.register_script(RESOLVE)

    # --- reading -----------------------------------------------------------------------
    def sync(self) -> None:
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

    def _pages(
        self, reason: str | None, batch: str | None, size: int = 200
    ) -> Iterator[list[OpenEscalation]]:
        """The open escalations a page at a time, oldest first: a claim stops at the first it
        takes instead of reading the whole queue (which made resolving N entries take N^2)."""
        self.sync()
        low = "-"
        while True:
            pending: Any = self.redis.xpending_range(self.stream, self.group, low, "+", size)
            if not pending:
                return
            yield self._entries(pending, reason, batch)
            if len(pending) < size:
                return
            low = "(" + _text(pending[-1]["message_id"])  # exclusive: after the last one read

    def _entries(self, pending: Any, reason: str | None, batch: str | None) -> list[OpenEscalation]:
        """The open escalations of ``pending`` (XPENDING rows), bodies read in one round trip."""
        if not pending:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for item in pending:
            entry_id = _text(item["message_id"])
            pipe.xrange(self.stream, min=entry_id, max=entry_id)
        bodies: list[Any] = pipe.execute()
        found = []
        gone = []
        skipped: list[str] = []

        def skip(entry_id: str, why: str) -> None:
            skipped.append(entry_id)
            self.on_skip(entry_id, why)

        for item, rows in zip(pending, bodies, strict=True):
            entry_id = _text(item["message_id"])
            if not rows:
                gone.append(entry_id)
                continue
            entry = decode_entry(entry_id, rows, skip)
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
        # The gauge counts these apart from the waiting ones (no scrape reads the bodies);
        # an entry this reader can read is no longer counted so, whoever recorded it.
        note_unreadable(
            self.redis, self.stream, self.group, skipped, readable=[e.entry_id for e in found]
        )
        if gone:
            # Pending in the group with no body (a trim, XTRIM, or XDEL removed it): nobody
            # can ever open it, and left pending it was counted as open for good. A stream
            # id never comes back, so acknowledging it loses nothing.
            self.redis.xack(self.stream, self.group, *gone)
            forget_unreadable(self.redis, self.stream, gone)
            for entry_id in gone:
                self.on_skip(entry_id, "its body is gone (trimmed or deleted from the stream)")
        return self.without_resolved(found)

    def without_resolved(self, found: list[OpenEscalation]) -> list[OpenEscalation]:
        """``found`` less the entries of jobs resolved already (a second entry of one job,
        as the escalation stream could hold before it took one a job): those are closed
        (acknowledged), so that no reader lists or hands out what cannot be resolved."""
        if not found:
            return found
        pipe = self.redis.pipeline(transaction=False)
        for item in found:
            pipe.exists(keys.resolved_record(item.message.job_id))
        resolved: list[Any] = pipe.execute()
        closed = [item.entry_id for item, done in zip(found, resolved, strict=True) if done]
        if closed:
            self.redis.xack(self.stream, self.group, *closed)
        return [item for item, done in zip(found, resolved, strict=True) if not done]

    def get(self, entry_id: str) -> OpenEscalation:
        self.sync()
        try:
            pending: Any = self.redis.xpending_range(self.stream, self.group, entry_id, entry_id, 1)
            found = self._entries(pending, None, None)
        except redis.ResponseError:  # not an entry id at all
            found = []
        if not found:
            raise EscalationNotFound(f"no open escalation {entry_id}")
        return found[0]

    # --- a reviewer's moves --------------------------------------------------------------
    def claim(
        self, reviewer: str, *, reason: str | None = None, batch: str | None = None
    ) -> OpenEscalation | None:
        """Take the oldest waiting escalation (or one a silent reviewer let lapse)."""
        _check_reviewer(reviewer)
        for item in (e for page in self._pages(reason, batch) for e in page):
            claimable = item.holder is None or item.idle_s * 1000 >= self.claim_idle_ms
            if item.holder == reviewer or not claimable or not self._can_check(item):
                continue
            taken = self._take(
                keys=[self.stream],
                args=[reviewer, self.claim_idle_ms, self.group, item.entry_id, QUEUE_CONSUMER],
            )
            if taken == 1:
                audit.record(self.redis, "claim", reviewer, item.entry_id, item.message)
                return OpenEscalation(item.entry_id, item.message, item.reply_to, reviewer, 0.0)
        return None

    def claim_entry(self, entry_id: str, reviewer: str) -> OpenEscalation:
        """Take this one escalation (a reviewer opened it); ``EscalationNotFound`` if it is
        closed or held by someone else who is not past the idle time."""
        _check_reviewer(reviewer)
        item = self.get(entry_id)
        if not self._can_check(item):
            raise EscalationNotFound(
                f"{entry_id} is a menu escalation: this reader has no menu engine"
            )
        if item.holder == reviewer:
            return item
        taken = self._take(
            keys=[self.stream],
            args=[reviewer, self.claim_idle_ms, self.group, entry_id, QUEUE_CONSUMER],
        )
        if taken != 1:
            raise EscalationNotFound(f"{entry_id} is held by {item.holder or 'another reviewer'}")
        audit.record(self.redis, "claim", reviewer, entry_id, item.message)
        return OpenEscalation(entry_id, item.message, item.reply_to, reviewer, 0.0)

    def _can_check(self, item: OpenEscalation) -> bool:
        """Whether this reader could check an answer to ``item``: a menu's needs the menu
        engine (``menu_checker``). Another reader with one may answer it: not unreadable."""
        return item.message.kind != "menu" or self.menu_checker is not None

    def release(self, entry_id: str, reviewer: str) -> None:
        """Give an escalation back to the queue for another reviewer."""
        done = self._give_back(
            keys=[self.stream], args=[self.group, entry_id, QUEUE_CONSUMER, reviewer]
        )
        if done != 1:
            raise EscalationNotFound(f"{reviewer} holds no open escalation {entry_id}")
        rows: Any = self.redis.xrange(self.stream, min=entry_id, max=entry_id)
        entry = decode_entry(entry_id, rows, self.on_skip)
        if entry is not None:
            audit.record(self.redis, "release", reviewer, entry_id, entry[0])

    def resolve(self, entry_id: str, reviewer: str, answer: Any) -> ResolutionMessage:
        """Check ``answer``, publish it as the job's resolution and close the escalation, in
        one step; ``AlreadyResolved`` (naming who and when) if the job was resolved before,
        ``EscalationNotFound`` if the entry is closed or ``reviewer`` does not hold it."""
        # The queue's own consumer name holds every waiting entry: as a reviewer's name it
        # would pass the holder check and resolve what nobody claimed.
        _check_reviewer(reviewer)
        try:
            rows: Any = self.redis.xrange(self.stream, min=entry_id, max=entry_id)
        except redis.ResponseError:  # not an entry id at all
            rows = None
        why: list[str] = []

        def skip(skipped: str, reason: str) -> None:
            why.append(reason)
            self.on_skip(skipped, reason)

        entry = decode_entry(entry_id, rows, skip)
        if entry is None:
            detail = f" ({why[0]})" if why else ""
            raise EscalationNotFound(f"no escalation {entry_id} that can be answered{detail}")
        message, reply_to = entry
        # Who holds it, and whether the job was resolved, before the answer is checked (a
        # big answer's check takes a while); the resolving call checks both again.
        self._resolve_step(entry_id, reviewer, message.job_id, reply_to, "", "")
        resolved = check_resolution(message, answer, menu_checker=self.menu_checker)
        labels = labels_of(message, resolved, reviewer)
        resolution = ResolutionMessage(
            job_id=message.job_id,
            batch=message.batch,
            metadata=message.metadata,
            reason=message.reason,
            answer=resolved,
            reviewer=reviewer,
        )
        self._resolve_step(
            entry_id,
            reviewer,
            message.job_id,
            reply_to,
            resolution.to_json(),
            encode(labels),  # "[]" for none: the ledger learns of every resolution
            publish=message.reason != AUDIT_REASON,
        )
        audit.record(self.redis, "resolve", reviewer, entry_id, message, resolved)
        return resolution

    def _resolve_step(
        self,
        entry_id: str,
        reviewer: str,
        job_id: str,
        reply_to: str,
        message_json: str,
        labels_json: str,
        *,
        publish: bool = True,
    ) -> None:
        """The resolving Lua call (only its checks when ``message_json`` is empty); raises
        what a refusal means."""
        try:
            outcome: Any = self._resolve(
                keys=[
                    self.stream,
                    keys.resolved_record(job_id),
                    keys.reply_stream(reply_to),
                    self.label_stream,
                ],
                args=[
                    self.group,
                    entry_id,
                    reviewer,
                    job_id,
                    message_json,
                    labels_json,
                    "1" if publish else "0",
                ],
            )
        except redis.ResponseError as exc:
            raise PublishFailed(
                f"the resolution of {entry_id} could not be published to reply stream "
                f"{reply_to!r} ({exc}); nothing was written, the escalation stays open"
            ) from None
        status = int(outcome[0])
        if status == 0:
            by, at_ms, first = (_text(v) for v in outcome[1:4])
            when = datetime.fromtimestamp(int(at_ms) / 1000, UTC).isoformat(timespec="seconds")
            raise AlreadyResolved(job_id, by, when, first)
        if status == -1:
            raise EscalationNotFound(f"{entry_id} is not open (resolved, or never escalated)")
        if status == -2:
            holder = _text(outcome[1])
            holder = "nobody" if holder == QUEUE_CONSUMER else holder
            raise EscalationNotFound(
                f"{entry_id} is held by {holder}, not {reviewer}: claim it first"
            )

    def resolution_of(self, job_id: str) -> dict[str, str] | None:
        """Who resolved ``job_id``, when (ms, Redis time) and from which entry; None: nobody."""
        record: Any = self.redis.hgetall(keys.resolved_record(job_id))
        return {_text(k): _text(v) for k, v in record.items()} or None


def _log_skip(entry_id: str, why: str) -> None:
    log.warning("skipped escalation entry %s: %s", entry_id, why)


def _check_reviewer(reviewer: str) -> None:
    if not reviewer or reviewer == QUEUE_CONSUMER:
        raise ValueError(f"reviewer name {reviewer!r} is reserved or empty")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
