"""What comes back on a job's ``reply_to`` stream: one terminal message per job.

``result`` (answers or a resolved menu value), ``escalation`` (a person must decide),
``rejected`` (the job was invalid; nothing was sent), and later a reviewer's ``resolution``.
Every message carries the job id, batch, metadata and the receipts of every call made.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "TERMINAL_TYPES",
    "Answer",
    "CostBasis",
    "EscalationMessage",
    "EscalationReason",
    "Evidence",
    "Receipt",
    "RejectedMessage",
    "Reply",
    "ResolutionMessage",
    "ResultMessage",
    "parse_reply",
]

CostBasis = Literal["reported", "estimate"]
ConfidenceSource = Literal["reported", "derived"]
CallStatus = Literal["answered", "failed", "not_sent", "unknown"]

EscalationReason = Literal[
    "decision_refused",
    "decision_interrupted",
    "low_confidence",
    "deadline_exceeded",
    "menu_unparseable",
    "handler_interrupted",
    "handler_failed",
    "provider_error",
    "verification_failed",
]


def _now() -> datetime:
    return datetime.now(UTC)


class Evidence(BaseModel):
    """A citation. ``scope: "call"`` applies to every answer of the request (Parallel)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    title: str | None = None
    excerpts: list[str] = Field(default_factory=list)
    scope: Literal["call", "question"] = "call"
    question: str | None = None


class Receipt(BaseModel):
    """One paid call: who answered, what it cost and on what basis, how it went on the wire."""

    model_config = ConfigDict(extra="forbid")

    step: str = Field(..., description="the call's step in its job: decide, pick.0, handler, ...")
    provider: str
    model: str | None = None
    decision_id: str | None = Field(None, description="the provider's request id")
    status: CallStatus
    cost_usd: float | None = Field(None, description="null is unknown, never 0 for unknown")
    cost_basis: CostBasis | None = None
    confidence_source: dict[str, ConfidenceSource] = Field(default_factory=dict)
    evidence: list[Evidence] = Field(default_factory=list)
    transport_attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    latency_ms: float | None = None
    request_sha256: str | None = None
    error_code: str | None = None
    ref_id: str | None = None
    replayed: bool = Field(False, description="read back from the ledger, not sent again")


class Answer(BaseModel):
    """One question's answer, decoded. A refused question has ``refused`` and no value."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["noul", "choice", "score"]
    value: bool | str | float | None = Field(
        None, description="noul: p >= 0.5; choice: the option; score: the weighted level index"
    )
    probability: float | None = Field(
        None, description="noul: probability of yes; choice: of the chosen option"
    )
    probabilities: dict[str, float] | None = None
    label: str | None = Field(None, description="score: the nearest level's label")
    confidence: float | None = None
    confidence_source: ConfidenceSource | None = None
    refused: bool = False


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    batch: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    receipts: list[Receipt] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=_now)

    def to_json(self) -> str:
        return self.model_dump_json()


class ResultMessage(_Message):
    type: Literal["result"] = "result"
    kind: str = "decide"
    answers: dict[str, Answer] | None = None
    value: Any = None


class EscalationMessage(_Message):
    type: Literal["escalation"] = "escalation"
    kind: str = "decide"
    reason: EscalationReason
    detail: str = ""
    #: The questions (or menu) a reviewer answers, and the state they are about.
    context: dict[str, Any] = Field(default_factory=dict)
    #: What the machine did answer, attached for the reviewer (refused ones marked so).
    answers: dict[str, Answer] | None = None
    reply_to: str | None = None


class RejectedMessage(_Message):
    type: Literal["rejected"] = "rejected"
    problems: list[dict[str, str]] = Field(..., description="[{field, message}], one per bad field")


class ResolutionMessage(_Message):
    type: Literal["resolution"] = "resolution"
    reason: EscalationReason
    answer: Any
    reviewer: str | None = None


Reply = Annotated[
    ResultMessage | EscalationMessage | RejectedMessage | ResolutionMessage,
    Field(discriminator="type"),
]
_REPLY_ADAPTER: TypeAdapter[Reply] = TypeAdapter(Reply)

#: A job ends with exactly one of these.
TERMINAL_TYPES = frozenset({"result", "escalation", "rejected"})


def parse_reply(raw: str | bytes | dict[str, Any]) -> Reply:
    if isinstance(raw, str | bytes):
        raw = json.loads(raw)
    return _REPLY_ADAPTER.validate_python(raw)
