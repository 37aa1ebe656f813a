"""Publishing once: a finished job's stored message to its stream, and rejections.

The job's terminal message is stored in the ledger first (the outbox); publishing writes it
to the job's reply stream once (``shared.streams``' publish-once marker) and then marks the
job published, so a crash in between re-publishes the stored bytes and never re-sends a
call. A result picked for an audit (``worker.delivery.audits``) carries its audit escalation in the
same publish. Publishes run on a thread, or through the process's group publish
(``worker.delivery.reply_batch.GroupPublish``: one Redis round trip for many jobs) when installed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from shared.errors import FieldProblem
from shared.rejection import rejection_for
from shared.streams import Publication, ReplyPublisher
from worker.delivery.audits import audit_json
from worker.delivery.ledger_io import LedgerIO
from worker.delivery.reply_batch import GroupPublish
from worker.ledger import JobRow
from worker.observability.observer import Observer
from worker.observability.tracing import publish_span

__all__ = ["Outbox"]

log = structlog.get_logger("decisions.outbox")


class Outbox:
    """Publishes stored terminal messages and rejections, each once per stream."""

    def __init__(
        self, sink: ReplyPublisher, ledger: LedgerIO, observer: Observer, group: GroupPublish | None
    ) -> None:
        self.sink = sink
        self.ledger = ledger
        self.observer = observer
        self.group = group

    async def _send(self, item: Publication) -> None:
        # The one place every terminal message and rejection is published: its span is here.
        with publish_span(
            stream=item.stream,
            job_id=item.job_id,
            message_type=item.message_type,
            escalation=item.escalation,
        ):
            if self.group is not None:
                await self.group.publish(item)
            else:
                await asyncio.to_thread(self.sink.publish, item)

    async def publish(self, row: JobRow, stream: str) -> str:
        """Publish the stored terminal message (first written wins) to this delivery's stream."""
        assert row.terminal_message is not None and row.terminal_type is not None
        escalation, audit = row.terminal_type == "escalation", audit_json(row)
        if row.published_at is not None and (escalation or audit) and (
            await self.ledger.resolved(row.job_id)
        ):
            # A replay (the job submitted again) of a job a reviewer resolved: Redis judges
            # that by its resolved record, which a Redis that forgot everything forgot; the
            # ledger's word keeps it out of the reviewers' queue (found by an attack).
            escalation, audit = False, None
        await self._send(
            Publication(
                stream=stream,
                job_id=row.job_id,
                message_type=row.terminal_type,
                message_json=row.terminal_message,
                escalation=escalation,
                # A job ``decisions budget resume`` reopened publishes its new message once
                # more, under a marker of its own (its first one holds the message before).
                marker=None if row.resumes == 0 else f"resume.{row.resumes}:{row.job_id}",
                audit_json=audit,
            )
        )
        if row.published_at is None:
            await self.ledger.mark_published(row.job_id)
        return row.terminal_type

    async def reject(self, raw: Any, problems: list[FieldProblem]) -> str:
        """A job that is not valid: its ``rejected`` message, naming each field; nothing sent."""
        rejection = rejection_for(raw, problems)
        log.info("job.rejected", job_id=rejection.job_id, fields=[p.field for p in problems])
        await self._send(Publication.rejected(rejection))
        kind = raw.get("kind") if isinstance(raw, dict) else None
        self.observer.job_finished(str(kind or "unknown"), "-", "rejected", None)
        return "rejected"
