"""What comes back on a job's ``reply_to`` stream: one terminal message per job.

``result`` (answers or a resolved menu value), ``escalation`` (a person must decide),
``rejected`` (the job was invalid; nothing was sent), and later a reviewer's ``resolution``.
Every message carries the job id, batch, metadata and the receipts of every call made.
A sift job's messages carry its ``items`` (one ``SiftItem`` each), a route's result its
``route_reason``, a verified decide job's its ``verifications``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from pydantic_core import PydanticSerializationError

__all__ = [
    "TERMINAL_TYPES",
    "Answer",
    "CostBasis",
    "EscalationMessage",
    "EscalationReason",
    "Evidence",
    "PackShare",
    "Receipt",
    "RejectedMessage",
    "Reply",
    "ResolutionMessage",
    "ResultMessage",
    "RouteReason",
    "SiftItem",
    "SiftItemStatus",
    "TerminalMessage",
    "Threshold",
    "Verification",
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
    # Not a failure: a share of confident results (a batch's audit_rate) sent for review
    # while the result itself went out (shared.labels).
    "audit",
    # A request whose worst case did not fit a budget: nothing was sent for it
    # (``decisions budget resume`` runs it again once the budget is raised).
    "budget_exhausted",
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


class PackShare(BaseModel):
    """A job's part of a request packed with other jobs' questions (``shared.packs``)."""

    model_config = ConfigDict(extra="forbid")

    pack_id: str = Field(..., description="the same on every job the request answered")
    jobs: int = Field(..., description="jobs whose questions the request carried")
    questions: int = Field(..., description="questions in the request, all jobs'")
    share: float = Field(..., description="this job's questions over the request's")
    request_cost_usd: float | None = Field(None, description="the whole request's cost")
    unpacked_cost_usd: float | None = Field(
        None, description="what this job alone would have cost (list price or token estimate)"
    )
    saved_usd: float | None = Field(None, description="unpacked_cost_usd minus this job's cost")


class Threshold(BaseModel):
    """The ``escalate_below`` a question's answer was judged by, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    value: float
    source: Literal["calibrated", "fallback"] = Field(
        ..., description="calibrated: suggested from the labels; fallback: too few labels"
    )
    target: float = Field(..., description="the accuracy the calibrated threshold aims at")
    labels: int = Field(..., description="labels behind the suggestion (or found, if too few)")


#: What a provider's request id may be to be kept (OpenRouter ``gen-...``, OpenAI
#: ``chatcmpl-...``, UUIDs): printable ASCII without spaces, at most 256 characters.
_PROVIDER_ID: Final = re.compile(r"[\x21-\x7e]{1,256}")


class Receipt(BaseModel):
    """One paid call: who answered, what it cost and on what basis, how it went on the wire."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("decision_id")
    @classmethod
    def _provider_id_or_none(cls, value: str | None) -> str | None:
        # The provider's own text (a header or a body field): an id of megabytes, or with
        # newlines and control characters, would ride on every message, ledger row and log
        # line of the call. Provider ids are short printable ASCII; anything else is dropped.
        return value if value is None or _PROVIDER_ID.fullmatch(value) else None

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
    packed: PackShare | None = Field(None, description="set when jobs shared the request")
    thresholds: dict[str, Threshold] | None = Field(
        None, description="per question asking for a calibrated escalate_below: the one used"
    )


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


SiftItemStatus = Literal["decided", "refused", "interrupted", "failed", "not_sent"]
#: Why a route job took its route: the model chose it, or the ``unsure`` route stood in for a
#: refusal or a confidence below the floor (a lost call escalates ``decision_interrupted``).
RouteReason = Literal["chosen", "refused", "low_confidence"]


class SiftItem(BaseModel):
    """One item of a sift job: its decision (keep when p(yes) >= 0.5) and its cost share.

    Only a ``decided`` item has ``keep``: a refused, interrupted or unsent one never decodes
    to a value.
    """

    model_config = ConfigDict(extra="forbid")

    index: int = Field(..., description="the item's position in the job's items")
    status: SiftItemStatus
    keep: bool | None = None
    probability: float | None = Field(None, description="probability of yes")
    confidence: float | None = None
    confidence_source: ConfidenceSource | None = None
    step: str | None = Field(None, description="the request it was asked in (sift.0, ...)")
    cost_share_usd: float | None = Field(
        None, description="its request's cost over the request's items; null is unknown"
    )
    cost_basis: CostBasis | None = None


class Verification(BaseModel):
    """One verifying decision of a decide job, and whether it agrees with the decision."""

    model_config = ConfigDict(extra="forbid")

    step: str
    provider: str
    model: str | None = None
    status: CallStatus
    answers: dict[str, Answer] | None = None
    #: None when there was nothing to compare (refused, failed, interrupted, not sent).
    agrees: bool | None = None
    disagreements: list[str] = Field(default_factory=list, description="question ids")


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    batch: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    receipts: list[Receipt] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=_now)

    @field_validator("created_at")
    @classmethod
    def _utc_when_naive(cls, value: datetime) -> datetime:
        # This worker writes UTC with its offset; a naive time (another writer, a hand-made
        # entry) is read as UTC, so every message's age can be taken (a naive time cannot
        # be subtracted from an aware one: one such entry made the console's list a 500).
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value

    def to_json(self) -> str:
        try:
            return self.model_dump_json()
        except PydanticSerializationError:
            # A string no UTF-8 can hold (a lone surrogate a handler returned): written with
            # "?" in its place, since a message that cannot be written leaves its job without
            # a terminal message for good (found by an attack), every redelivery failing alike.
            text = json.dumps(
                self.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
            )
            return text.encode("utf-8", "replace").decode("utf-8")


class ResultMessage(_Message):
    type: Literal["result"] = "result"
    kind: str = "decide"
    answers: dict[str, Answer] | None = None
    value: Any = None
    items: list[SiftItem] | None = None
    route_reason: RouteReason | None = None
    verifications: list[Verification] | None = None


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
    items: list[SiftItem] | None = None
    verifications: list[Verification] | None = None


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

#: What a job kind builds to end a job (a rejection is the delivery protocol's own).
TerminalMessage = ResultMessage | EscalationMessage

#: A job ends with exactly one of these.
TERMINAL_TYPES = frozenset({"result", "escalation", "rejected"})


def parse_reply(raw: str | bytes | dict[str, Any]) -> Reply:
    """A reply message from its JSON or dict: ``ValueError`` if the text is not JSON (nested
    too deep to read included), ``pydantic.ValidationError`` if it is not a reply."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except RecursionError:
            # A stream entry is anyone's to write: a 200 KB "[[[[..." must be one unreadable
            # entry to its readers, as any other non-JSON is, not an error that stops them.
            raise ValueError("JSON nested too deep to read") from None
    return _REPLY_ADAPTER.validate_python(raw)
