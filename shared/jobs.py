"""Decision jobs: the wire contract producers put on the queue (JSON only).

``parse_job`` is the one entry point: it turns a JSON object (or raw bytes) into a job or
raises ``JobInvalid`` naming every bad field, so that nothing invalid is ever sent.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.canonical import digest_of
from shared.errors import FieldProblem, JobInvalid
from shared.questions import Question, State

__all__ = [
    "DecideJob",
    "Job",
    "JobId",
    "StreamName",
    "job_deadline",
    "job_fingerprint",
    "parse_job",
    "problems_from_validation",
]

#: A producer's idempotency key: printable, no whitespace at the ends.
JobId = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=200, pattern=r"^[^\s\x00-\x1f]([^\x00-\x1f]*[^\s\x00-\x1f])?$"
    ),
]
#: A Redis stream name the worker may append to.
StreamName = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9:._\-/]*$")
]

MAX_STATE_BYTES = 32 * 1024 * 1024  # the System One body limit


class JobBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: JobId = Field(..., description="the producer's idempotency key, unique per logical job")
    batch: str | None = Field(None, max_length=200)
    reply_to: StreamName = Field(..., description="the Redis stream that gets the terminal message")
    deadline: AwareDatetime | None = Field(None, description="absolute UTC deadline")
    timeout_s: float | None = Field(None, gt=0, description="deadline relative to submission")
    submitted_at: AwareDatetime | None = Field(None, description="stamped by the client")
    metadata: dict[str, Any] = Field(default_factory=dict, description="echoed back untouched")

    @model_validator(mode="after")
    def _one_deadline(self) -> JobBase:
        if self.deadline is not None and self.timeout_s is not None:
            raise ValueError("set deadline or timeout_s, not both")
        return self


class DecideJob(JobBase):
    """Questions about a state, answered by a decision provider."""

    kind: Literal["decide"] = "decide"
    state: State
    questions: dict[str, Question] = Field(..., min_length=1)
    provider: str | None = Field(None, min_length=1, description="default from settings")
    model: str | None = Field(None, min_length=1, description="default from the provider")

    @field_validator("state")
    @classmethod
    def _state_fits(cls, value: State) -> State:
        if isinstance(value, str) and not value.strip():
            raise ValueError("state must not be empty")
        if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_STATE_BYTES:
            raise ValueError(f"state is over {MAX_STATE_BYTES} bytes")
        return value

    @field_validator("questions")
    @classmethod
    def _question_ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        for qid in value:
            if not qid.strip():
                raise ValueError("question ids must not be empty")
        return value


Job = DecideJob
_JOB_ADAPTER: TypeAdapter[Job] = TypeAdapter(Job)


def problems_from_validation(error: ValidationError) -> list[FieldProblem]:
    """One FieldProblem per pydantic error, with a dotted path (``questions.q1.criteria``)."""
    problems = []
    for item in error.errors(include_url=False):
        # Drop the discriminator tag pydantic inserts into union paths ("choice", "function-after").
        path = [str(p) for p in item["loc"] if not _is_union_tag(p)]
        message = item["msg"].removeprefix("Value error, ")
        problems.append(FieldProblem(".".join(path) or "(job)", message))
    return problems


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and (
        part in {"noul", "choice", "score"} or "[" in part or part.startswith("function-")
    )


def parse_job(raw: Any) -> Job:
    """Validate a job from a dict, a JSON string or bytes; ``JobInvalid`` names every bad field."""
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise JobInvalid(
                [FieldProblem("(body)", f"not JSON: {exc.__class__.__name__}")]
            ) from None
    if not isinstance(raw, dict):
        raise JobInvalid(
            [FieldProblem("(job)", f"a job is a JSON object, not {type(raw).__name__}")]
        )
    job_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    kind = raw.get("kind", "decide")
    if kind != "decide":
        raise JobInvalid(
            [FieldProblem("kind", f"unknown kind {kind!r}; expected 'decide'")], job_id
        )
    try:
        return _JOB_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise JobInvalid(problems_from_validation(exc), job_id) from None


def job_deadline(
    job: Job, *, default_s: float, ceiling_s: float, now: datetime | None = None
) -> datetime:
    """The job's absolute deadline: its own, or submission (or now) plus its timeout or the default.

    A deadline further away than the ceiling is cut to the ceiling.
    """
    now = now or datetime.now(UTC)
    start = job.submitted_at or now
    if job.deadline is not None:
        deadline = job.deadline
    else:
        deadline = start + timedelta(seconds=job.timeout_s or default_s)
    return min(deadline, start + timedelta(seconds=ceiling_s))


def job_fingerprint(job: Job) -> str:
    """What makes two submissions the same logical job.

    Transport fields are left out: the same job resubmitted later, or to another reply stream,
    is the same job, and gets its stored outcome there.
    """
    body = job.model_dump(
        mode="json", exclude={"submitted_at", "deadline", "timeout_s", "reply_to"}
    )
    return digest_of(body)
