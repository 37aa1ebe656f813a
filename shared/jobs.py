"""Decision jobs: the wire contract producers put on the queue (JSON only).

Four kinds, one envelope (``JobBase``): ``decide`` (questions about a state, for a decision
provider, optionally ``verify``-ed by more decisions) and ``menu`` (a prompt and a menu of
options, for an LLM runtime; the options in the JSON encoding of ``shared.menus.menu_json``,
checked here in full except for whether a handler is registered, which only the worker can
know), and the batch judgments of ``shared.judgments``: ``sift`` (one yes/no question over a
list of items) and ``route`` (a choice over named routes with an ``unsure`` branch). ``Job``
is the union, discriminated on ``kind``.

``parse_job`` is the one entry point: it turns a JSON object (or raw bytes) into a job or
raises ``JobInvalid`` naming every bad field (``options[2].schema.fields[0].type``), so that
nothing invalid is ever sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
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
    ValidationInfo,
    field_validator,
)

from shared.canonical import digest_of
from shared.errors import FieldProblem, JobInvalid
from shared.judgments.specs import RouteFields, SiftFields, VerifySpec
from shared.menus.errors import MenuSpecInvalid
from shared.menus.menu_json import menu_from_json, menu_to_json
from shared.menus.session import DEFAULT_MAX_STEPS
from shared.questions import Question, State

__all__ = [
    "JOB_KINDS",
    "JOB_TYPES",
    "MAX_RETRIES",
    "MAX_WORK_STEPS",
    "DecideJob",
    "Job",
    "JobId",
    "MenuJob",
    "MenuRuntime",
    "MenuWork",
    "RouteJob",
    "SiftJob",
    "StreamName",
    "job_deadline",
    "job_fingerprint",
    "job_kind",
    "menu_problems",
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
# Built once: json.dumps with a non-default option builds an encoder per call (a third of
# a small state's check).
_STATE_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _state_bytes(state: Any) -> int:
    """The UTF-8 size of the state's JSON; a lone surrogate raises (a ValueError), as before."""
    text = _STATE_ENCODER.encode(state)
    # ASCII text is one byte a character: its length is its size, without encoding it.
    return len(text) if text.isascii() else len(text.encode())


class JobBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: JobId = Field(..., description="the producer's idempotency key, unique per logical job")
    batch: str | None = Field(None, max_length=200)
    reply_to: StreamName = Field(..., description="the Redis stream that gets the terminal message")
    deadline: AwareDatetime | None = Field(None, description="absolute UTC deadline")
    timeout_s: float | None = Field(None, gt=0, description="deadline relative to submission")
    submitted_at: AwareDatetime | None = Field(None, description="stamped by the client")
    metadata: dict[str, Any] = Field(default_factory=dict, description="echoed back untouched")

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
    provider: str | None = Field(None, min_length=1, description="default from settings")
    model: str | None = Field(None, min_length=1, description="default from the provider")
    verify: VerifySpec | None = Field(None, description="independent decisions that must agree")
    pack: bool = Field(
        False,
        description="may share one request with jobs of its batch about the same state, "
        "for the same provider and model (shared.packs)",
    )

    @field_validator("state")
    @classmethod
    def _state_fits(cls, value: State) -> State:
        if isinstance(value, str) and not value.strip():
            raise ValueError("state must not be empty")
        if _state_bytes(value) > MAX_STATE_BYTES:
            raise ValueError(f"state is over {MAX_STATE_BYTES} bytes")
        return value

    @field_validator("questions")
    @classmethod
    def _question_ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        for qid in value:
            if not qid.strip():
                raise ValueError("question ids must not be empty")
        return value


#: A registered handler's name, as a job names it (never code: the worker has an allowlist).
HandlerName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\S+$")]
#: Re-picks a menu job may ask for after a failed pick.
MAX_RETRIES = 5
#: Model turns a work turn may take at most.
MAX_WORK_STEPS = 32


class MenuRuntime(BaseModel):
    """Which LLM answers a menu: a chat runtime by name and its model (defaults from settings)."""

    model_config = ConfigDict(extra="forbid")

    provider: str | None = Field(None, min_length=1, description="default: settings")
    model: str | None = Field(None, min_length=1, description="default: the runtime's")


class MenuWork(BaseModel):
    """Work first, decide last: tools the model may call before its closing pick."""

    model_config = ConfigDict(extra="forbid")

    tools: list[HandlerName] = Field(
        default_factory=list, description="registered handlers offered as native tools"
    )
    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1, le=MAX_WORK_STEPS, description="model turns")

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
    prompt: str = Field(..., min_length=1, max_length=1_000_000)
    options: list[dict[str, Any]] = Field(
        ..., min_length=1, description="the options encoding (shared.menus.OPTIONS_JSON_SCHEMA)"
    )
    context: dict[str, Any] = Field(default_factory=dict, description="injected, never shown")
    max_retries: int = Field(1, ge=0, le=MAX_RETRIES, description="re-picks after a bad pick")
    runtime: MenuRuntime = Field(default_factory=MenuRuntime)
    work: MenuWork | None = Field(None, description="tools and a step limit (work first)")

    @classmethod
    def of(cls, *, prompt: str, options: Any, **fields: Any) -> MenuJob:
        """A menu job from options in the Python notation (encoded with ``menu_to_json``)."""
        encoded = menu_to_json(options)
        job = parse_job({"kind": "menu", "prompt": prompt, "options": encoded, **fields})
        assert isinstance(job, MenuJob)
        return job


class SiftJob(JobBase, SiftFields):
    """One yes/no question over a list of items (``shared.judgments``); keep p >= 0.5."""

    kind: Literal["sift"] = "sift"


class RouteJob(JobBase, RouteFields):
    """A choice over named routes, with an ``unsure`` branch (``shared.judgments``)."""

    kind: Literal["route"] = "route"


AnyJob = DecideJob | MenuJob | SiftJob | RouteJob
Job = Annotated[AnyJob, Field(discriminator="kind")]
#: The job classes, for ``isinstance`` (``Job`` itself is an annotated union).
JOB_TYPES: tuple[type[DecideJob], type[MenuJob], type[SiftJob], type[RouteJob]] = (
    DecideJob, MenuJob, SiftJob, RouteJob,
)
JOB_KINDS = ("decide", "menu", "sift", "route")
_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "decide": TypeAdapter(DecideJob),
    "menu": TypeAdapter(MenuJob),
    "sift": TypeAdapter(SiftJob),
    "route": TypeAdapter(RouteJob),
}


def _unchecked_handler(**kwargs: Any) -> Any:  # pragma: no cover - decoded, never called
    return kwargs


class _AnyHandler(Mapping[str, Callable[..., Any]]):
    """Every handler name resolves: whether it is registered is the worker's to say."""

    def __getitem__(self, key: str) -> Callable[..., Any]:
        return _unchecked_handler

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def menu_problems(
    options: Any, handlers: Mapping[str, Callable[..., Any]] | None = None
) -> list[FieldProblem]:
    """Every bad option of a menu job's ``options``, each named (``options[2].handler``).

    Each option is decoded on its own, so that one bad option does not hide the next; with
    ``handlers`` (the worker's registry) unregistered handler names are problems too.
    """
    if not isinstance(options, list) or not options:
        return [FieldProblem("options", "options is a non-empty JSON array")]
    lookup = _AnyHandler() if handlers is None else handlers
    problems: list[FieldProblem] = []
    seen: set[str] = set()
    for i, item in enumerate(options):
        try:
            menu_from_json([item], lookup)
        except MenuSpecInvalid as exc:
            problems.append(FieldProblem(f"options[{i}]{exc.path.removeprefix('[0]')}", exc.detail))
            continue
        name = item["name"]
        if name in seen:
            problems.append(FieldProblem(f"options[{i}].name", f"duplicate option name {name!r}"))
        seen.add(name)
    return problems


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


def parse_job(raw: Any) -> AnyJob:
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
    adapter = _ADAPTERS.get(kind) if isinstance(kind, str) else None
    if adapter is None:
        expected = " or ".join(repr(k) for k in JOB_KINDS)
        problem = FieldProblem("kind", f"unknown kind {kind!r}; expected {expected}")
        raise JobInvalid([problem], job_id)
    problems: list[FieldProblem] = []
    job = None
    try:
        job = adapter.validate_python(raw)
    except ValidationError as exc:
        problems = problems_from_validation(exc)
    if kind == "menu" and isinstance(raw.get("options"), list):
        named = {p.field for p in problems}
        problems += [p for p in menu_problems(raw["options"]) if p.field not in named]
    if problems or job is None:
        raise JobInvalid(problems, job_id)
    assert isinstance(job, JOB_TYPES)
    return job


def job_kind(raw: Any) -> str | None:
    """The ``kind`` a raw job says it is, without validating it (``None``: nothing readable)."""
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
    kind = raw.get("kind", "decide") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else None


def job_deadline(
    job: AnyJob, *, default_s: float, ceiling_s: float, now: datetime | None = None
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


def job_fingerprint(job: AnyJob) -> str:
    """What makes two submissions the same logical job.

    Transport fields are left out: the same job resubmitted later, or to another reply stream,
    or with packing turned on or off, is the same job, and gets its stored outcome there.
    """
    body = job.model_dump(
        mode="json", exclude={"submitted_at", "deadline", "timeout_s", "reply_to", "pack"}
    )
    return digest_of(body)
