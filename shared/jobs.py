"""Decision jobs: the wire contract producers put on the queue (JSON only).

Four kinds, one envelope (``JobBase``): ``decide`` (questions about a state, for a decision
provider, optionally ``verify``-ed by more decisions) and ``menu`` (a prompt and a menu of
options, for an LLM runtime; the options in the JSON encoding of ``shared.menus.menu_json``,
checked here in full except for whether a handler is registered, which only the worker can
know), and the batch judgments of ``shared.judgments``: ``sift`` (one yes/no question over a
list of items) and ``route`` (a choice over named routes with an ``unsure`` branch). ``Job``
is the union, discriminated on ``kind``.

``shared.job_parsing.parse_job`` is the one entry point: it turns a JSON object (or raw bytes)
into a job or raises ``JobInvalid`` naming every bad field; ``shared.fingerprint`` says when
two submissions are the same job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared import keys
from shared.images import ImageKey, JobImage
from shared.judgments.specs import RouteFields, SiftFields, VerifySpec
from shared.ledger_text import LedgerText, no_control_characters
from shared.limits import (
    MAX_BUDGET_USD,
    MAX_JOB_IMAGES,
    MAX_PROMPT_CHARS,
    Limits,
)
from shared.menus.menu_json import menu_to_json
from shared.menus.session import DEFAULT_MAX_STEPS
from shared.questions import Question, State

__all__ = [
    "JOB_KINDS",
    "JOB_TYPES",
    "MAX_RETRIES",
    "MAX_WORK_STEPS",
    "MIN_AUDIT_RATE",
    "SUBMITTED_AT_ALLOWANCE_S",
    "BatchName",
    "DecideJob",
    "Job",
    "JobId",
    "MenuJob",
    "MenuRuntime",
    "MenuWork",
    "RouteJob",
    "SiftJob",
    "StreamName",
]

#: A producer's idempotency key: printable, no whitespace at the ends.
JobId = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=200, pattern=r"^[^\s\x00-\x1f]([^\x00-\x1f]*[^\s\x00-\x1f])?$"
    ),
]

def _names_a_batch(value: str) -> str:
    # "" or "  " named a batch nobody can name back: `decisions budget show ""` and every
    # --batch filter refuse a blank name, and a budget_usd set on it was counted there.
    if not value.strip():
        raise ValueError("a batch's name: not empty nor only spaces (leave batch out for none)")
    return value


#: A batch's name: ledger text (no control characters), not blank.
BatchName = Annotated[LedgerText, AfterValidator(_names_a_batch)]

#: The smallest non-zero ``audit_rate``: ``1 / shared.calibration.MAX_WEIGHT``.
MIN_AUDIT_RATE = 1e-9
#: How far a producer's ``submitted_at`` may run ahead of the clock that judges deadlines
#: (machines' clocks differ by this much); a stamp later than that is clamped to its now.
SUBMITTED_AT_ALLOWANCE_S = 5.0
#: A Redis stream name the worker may append to.
def _reply_name(value: str) -> str:
    problem = keys.reply_to_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: A reply stream's name, inside the reply namespace (``shared.keys``); never a key.
StreamName = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=keys.MAX_REPLY_NAME, pattern=keys.REPLY_NAME_PATTERN
    ),
    AfterValidator(_reply_name),
]

#: The default state limit (``shared.limits``; the setting DECISIONS_MAX_STATE_BYTES lowers it).
MAX_STATE_BYTES = Limits().state_bytes


class JobBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: JobId = Field(..., description="the producer's idempotency key, unique per logical job")
    batch: BatchName | None = Field(None, max_length=200)
    reply_to: StreamName = Field(..., description="the Redis stream that gets the terminal message")
    deadline: AwareDatetime | None = Field(None, description="absolute UTC deadline")
    timeout_s: float | None = Field(None, gt=0, description="deadline relative to submission")
    submitted_at: AwareDatetime | None = Field(None, description="stamped by the client")
    metadata: dict[str, Any] = Field(default_factory=dict, description="echoed back untouched")
    audit_rate: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="decide jobs: the share of confident results also sent to reviewers as "
        "audit escalations (chosen by a hash of the job id; the result is not held back)",
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        le=MAX_BUDGET_USD,
        allow_inf_nan=False,
        strict=True,
        description="the batch's budget in USD, if it has none yet: a request whose worst "
        "case does not fit is not sent (escalated budget_exhausted); needs batch",
    )

    @field_validator("budget_usd")
    @classmethod
    def _budget_of_a_batch(cls, value: float | None, info: ValidationInfo) -> float | None:
        # A field validator (batch is validated first), so the rejection names this field.
        if value is not None and info.data.get("batch") is None:
            raise ValueError("a budget belongs to a batch: set batch too")
        return value

    @field_validator("audit_rate")
    @classmethod
    def _audit_rate_that_counts(cls, value: float | None) -> float | None:
        # Below one in a billion an audit picks next to no job, and its label could not be
        # stored: its weight would be over shared.calibration.MAX_WEIGHT (the reviewer's
        # answer then made no label at all). 0 (no audits) stays allowed.
        if value is not None and 0 < value < MIN_AUDIT_RATE:
            raise ValueError(f"is 0 or at least {MIN_AUDIT_RATE:g} (one in a billion)")
        return value

    @field_validator("timeout_s")
    @classmethod
    def _one_deadline(cls, value: float | None, info: ValidationInfo) -> float | None:
        # A field validator (deadline is validated first), so the rejection names the field.
        if value is not None and info.data.get("deadline") is not None:
            raise ValueError("set deadline or timeout_s, not both")
        return value


class DecideJob(JobBase):
    """Questions about a state, answered by a decision provider."""

    kind: Literal["decide"] = "decide"
    state: State
    questions: dict[str, Question] = Field(..., min_length=1)
    provider: LedgerText | None = Field(None, min_length=1, description="default from settings")
    model: LedgerText | None = Field(None, min_length=1, description="default from the provider")
    verify: VerifySpec | None = Field(None, description="independent decisions that must agree")
    pack: bool = Field(
        False,
        description="may share one request with jobs of its batch about the same state, "
        "for the same provider and model (shared.packs)",
    )
    images: dict[ImageKey, JobImage] | None = Field(
        None,
        min_length=1,
        max_length=MAX_JOB_IMAGES,
        description="images (experimental) referenced as <key> from the state or a question",
    )

    @model_validator(mode="after")
    def _images_apply(self) -> DecideJob:
        if self.images is None:
            return self
        # A packed request is about one shared state: its jobs' images are not packed (yet).
        if self.pack:
            raise ValueError("images: a job with images is never packed; drop pack")
        return self

    @field_validator("state")
    @classmethod
    def _state_fits(cls, value: State) -> State:
        # Its size was checked before validation (``shared.limits``), on the raw job.
        if isinstance(value, str) and not value.strip():
            raise ValueError("state must not be empty")
        return value

    @field_validator("questions")
    @classmethod
    def _question_ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        for qid in value:
            if not qid.strip():
                raise ValueError("question ids must not be empty")
            try:
                no_control_characters(qid)  # a label's question_id in the ledger
            except ValueError as exc:
                raise ValueError(f"question id {qid!r} {exc}") from None
        return value


#: A registered handler's name, as a job names it (never code: the worker has an allowlist).
HandlerName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\S+$")]
#: Re-picks a menu job may ask for after a failed pick.
MAX_RETRIES = 5
#: Model turns a work turn may take at most.
MAX_WORK_STEPS = 32
#: Tool calls of one model reply that are run (the rest are answered "not run"), by default
#: and at most; and of one job.
DEFAULT_TOOL_CALLS_PER_REPLY = 8
MAX_TOOL_CALLS_PER_REPLY = 64
DEFAULT_TOOL_CALLS_PER_JOB = 32
MAX_TOOL_CALLS_PER_JOB = 256


class MenuRuntime(BaseModel):
    """Which LLM answers a menu: a chat runtime by name and its model (defaults from settings)."""

    model_config = ConfigDict(extra="forbid")

    provider: LedgerText | None = Field(None, min_length=1, description="default: settings")
    model: LedgerText | None = Field(None, min_length=1, description="default: the runtime's")


class MenuWork(BaseModel):
    """Work first, decide last: tools the model may call before its closing pick."""

    model_config = ConfigDict(extra="forbid")

    tools: list[HandlerName] = Field(
        default_factory=list, description="registered handlers offered as native tools"
    )
    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1, le=MAX_WORK_STEPS, description="model turns")
    max_tool_calls_per_reply: int = Field(
        DEFAULT_TOOL_CALLS_PER_REPLY,
        ge=1,
        le=MAX_TOOL_CALLS_PER_REPLY,
        description="tool calls of one model reply that are run; the rest are answered "
        "'not run' and never executed",
    )
    max_tool_calls: int = Field(
        DEFAULT_TOOL_CALLS_PER_JOB,
        ge=1,
        le=MAX_TOOL_CALLS_PER_JOB,
        description="tool calls of the whole job that are run; the rest are answered 'not run'",
    )

    @field_validator("tools")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a tool is named twice")
        return value


class MenuJob(JobBase):
    """A prompt and a menu of options; the model picks one and the worker resolves it.

    ``options`` is the JSON encoding of ``shared.menus.OPTIONS_JSON_SCHEMA`` (``MenuJob.of``
    encodes the Python notation); ``context`` fills handlers' ``FromContext`` parameters.
    """

    kind: Literal["menu"] = "menu"
    prompt: str = Field(..., min_length=1, max_length=MAX_PROMPT_CHARS)
    options: list[dict[str, Any]] = Field(
        ..., min_length=1, description="the options encoding (shared.menus.OPTIONS_JSON_SCHEMA)"
    )
    context: dict[str, Any] = Field(default_factory=dict, description="injected, never shown")
    max_retries: int = Field(
        1, ge=0, le=MAX_RETRIES, description="re-picks after a bad pick (with work: exactly 1)"
    )
    runtime: MenuRuntime = Field(default_factory=MenuRuntime)
    work: MenuWork | None = Field(None, description="tools and a step limit (work first)")

    @classmethod
    def of(cls, *, prompt: str, options: Any, **fields: Any) -> MenuJob:
        """A menu job from options in the Python notation (encoded with ``menu_to_json``)."""
        encoded = menu_to_json(options)
        from shared.job_parsing import parse_job  # it builds on this module

        job = parse_job({"kind": "menu", "prompt": prompt, "options": encoded, **fields})
        assert isinstance(job, MenuJob)
        return job


class SiftJob(JobBase, SiftFields):
    """One yes/no question over a list of items (``shared.judgments``); keep p >= 0.5."""

    kind: Literal["sift"] = "sift"
    images: dict[ImageKey, JobImage] | None = Field(
        None,
        min_length=1,
        max_length=MAX_JOB_IMAGES,
        description="images (experimental) referenced as <key> from the state, the question "
        "or an item; each packed request carries the images its own items and state reference",
    )


class RouteJob(JobBase, RouteFields):
    """A choice over named routes, with an ``unsure`` branch (``shared.judgments``)."""

    kind: Literal["route"] = "route"
    images: dict[ImageKey, JobImage] | None = Field(
        None,
        min_length=1,
        max_length=MAX_JOB_IMAGES,
        description="images (experimental) referenced as <key> from the state or instructions",
    )


AnyJob = DecideJob | MenuJob | SiftJob | RouteJob
Job = Annotated[AnyJob, Field(discriminator="kind")]
#: The job classes, for ``isinstance`` (``Job`` itself is an annotated union).
JOB_TYPES: tuple[type[DecideJob], type[MenuJob], type[SiftJob], type[RouteJob]] = (
    DecideJob,
    MenuJob,
    SiftJob,
    RouteJob,
)
JOB_KINDS = ("decide", "menu", "sift", "route")
