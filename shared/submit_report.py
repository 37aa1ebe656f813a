"""What a submit did (``Client.submit_batch``'s answer): the ids queued, the jobs and lines
rejected at once, the messages sent. Apart from the client so that the client stays the
submitting, and a report is read by code that never submits (the CLI's printing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from shared.errors import FieldProblem

__all__ = ["SubmitReport"]


@dataclass
class SubmitReport:
    """What a submit did: the ids queued, and the problems of those rejected at once.

    ``rejected`` is keyed by job id only; a job rejected without a readable id is in
    ``rejected_lines``, by its 0-based position in the jobs submitted (it was under a
    made-up ``line-N`` key in ``rejected``, which a job could take as its id: found by an
    attack, one rejection hid another and a queued job was reported rejected)."""

    job_ids: list[str] = field(default_factory=list)
    rejected: dict[str, list[FieldProblem]] = field(default_factory=dict)
    rejected_lines: dict[int, list[FieldProblem]] = field(default_factory=dict)
    messages: int = 0
    #: The latest deadline of the jobs queued (None: none queued): by then plus the lease
    #: margin each should have its terminal message, if a worker took it.
    latest_deadline: datetime | None = None

    @property
    def all_ids(self) -> list[str]:
        return [*self.job_ids, *self.rejected]

    #: Every job rejected at once, a repeated id each time (``rejected`` keeps one entry an
    #: id: found by an attack, three rejections reported as two).
    rejections: int = 0

    @property
    def rejected_count(self) -> int:
        return max(self.rejections, len(self.rejected) + len(self.rejected_lines))
