"""What one step of a judgment came to, and the little a message builder needs of its plan.

Pure values: the worker's ledger calls (``worker.kinds.judgments.calls``) produce
``StepResult``s, and its plans (``worker.kinds.judgments.plan.PlannedCall``) are
``PlannedStep``s; the terminal-message builders (``shared.judgments.sift``, ``route``,
``verify``) read only these, so they stay free of I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from shared.replies import Answer, EscalationReason, Receipt

__all__ = ["PlannedStep", "StepResult", "StepStatus"]

StepStatus = Literal["answered", "failed", "not_sent", "unknown", "late"]


@dataclass(frozen=True)
class StepResult:
    """What one step of a job came to, sent now or read back from the ledger."""

    step: str
    status: StepStatus
    receipt: Receipt | None
    answers: dict[str, Answer] | None = None
    #: Why the job escalates when the step brought no answers.
    reason: EscalationReason = "provider_error"
    detail: str = ""


class PlannedStep(Protocol):
    """A planned paid request as the message builders see it."""

    @property
    def step(self) -> str: ...

    @property
    def question_ids(self) -> tuple[str, ...]: ...

    @property
    def provider_name(self) -> str: ...

    @property
    def model(self) -> str | None: ...
