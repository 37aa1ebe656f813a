"""Calibration figures from the ledger's labels: grouped, then measured by ``shared.calibration``.

A group is one question id and type, provider and model (the model as the receipt names it):
a threshold is only meaningful for one question asked of one model, and a question id reused
with another type (a yes/no where a choice was) is another question. ``group_reports`` also
says which labels it used (``sources``: how many from audits, how many from escalations) and
whether they can speak for the confident side at all (``audited``). A label that cannot count
(``shared.calibration.countable``) is in neither: only in the report's ``left_out``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from shared.calibration import (
    DEFAULT_BINS,
    DEFAULT_MIN_LABELS,
    DEFAULT_THRESHOLDS,
    Report,
    Rule,
    Scored,
    countable,
    report,
)
from worker.ledger.label_ops import LabelRow

__all__ = ["GroupKey", "GroupReport", "group_reports", "scored"]

GroupKey = tuple[str, str, str | None, str | None]


@dataclass(frozen=True)
class GroupReport:
    question: str
    provider: str | None
    model: str | None
    question_type: str
    report: Report
    sources: dict[str, int]

    @property
    def audited(self) -> bool:
        """Whether any label came from an audit: without, the confident side is unmeasured."""
        return self.sources.get("audit", 0) > 0

    @property
    def caveat(self) -> str | None:
        if self.audited:
            return None
        return (
            "no audit labels: only escalated answers were labelled, so the figures describe "
            "the low-confidence side; set audit_rate on the batch to measure the rest"
        )


def scored(rows: Sequence[LabelRow]) -> list[Scored]:
    return [
        Scored(
            correct=row.correct,
            confidence=row.confidence,
            probability=row.probability,
            weight=row.weight,
        )
        for row in rows
    ]


def group_reports(
    rows: Sequence[LabelRow],
    *,
    target: float | None = None,
    bins: int = DEFAULT_BINS,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    min_labels: float = DEFAULT_MIN_LABELS,
    rule: Rule = "estimate",
) -> list[GroupReport]:
    """One report per (question, type, provider, model), in that order."""
    groups: dict[GroupKey, list[LabelRow]] = defaultdict(list)
    for row in rows:
        groups[(row.question_id, row.question_type, row.provider, row.model)].append(row)
    out = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2] or "", k[3] or "")):
        members = groups[key]
        labels = scored(members)
        # The sources of the labels that counted: they add up to the report's ``labels``.
        counted = [row for row, s in zip(members, labels, strict=True) if countable(s)]
        out.append(
            GroupReport(
                question=key[0],
                question_type=key[1],
                provider=key[2],
                model=key[3],
                report=report(
                    labels,
                    target=target,
                    bins=bins,
                    thresholds=thresholds,
                    min_labels=min_labels,
                    rule=rule,
                ),
                sources=dict(Counter(row.source for row in counted)),
            )
        )
    return out
