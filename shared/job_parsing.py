"""Parsing a job: JSON (or raw bytes) to a ``shared.jobs`` model, or every bad field named.

``parse_job`` is the one entry point: it turns a JSON object (or raw bytes) into a job or
raises ``JobInvalid`` naming every bad field (``options[2].schema.fields[0].type``), so that
nothing invalid is ever sent. ``job_kind`` and ``job_deadline`` read what the worker needs
before (or without) a full parse.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from shared import strict_json
from shared.errors import FieldProblem, JobInvalid, NotStrictJSON
from shared.jobs import (
    JOB_KINDS,
    JOB_TYPES,
    SUBMITTED_AT_ALLOWANCE_S,
    AnyJob,
    DecideJob,
    MenuJob,
    RouteJob,
    SiftJob,
)
from shared.limits import MAX_ID_CHARS, REFUSED_KEY, Limits, job_problems, refused_problems
from shared.menus.errors import MenuSpecInvalid
from shared.menus.menu_json import menu_from_json
from shared.menus.session import TURN_RETRIES

__all__ = [
    "job_deadline",
    "job_kind",
    "menu_problems",
    "parse_job",
    "problems_from_validation",
    "stored_job",
]


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
        if item["type"] in ("union_tag_not_found", "union_tag_invalid") and path[:1] == [
            "questions"
        ]:
            # pydantic's "Unable to extract tag using discriminator 'type'" says nothing to a
            # person: the question union is told apart by its "type".
            tag = item.get("ctx", {}).get("tag")
            message = (f"no known type {tag!r}; " if tag else "") + _QUESTION_TYPE_NEEDED
        problems.append(FieldProblem(".".join(path) or "(job)", message))
    return problems


_QUESTION_TYPE_NEEDED = 'a question needs "type": "noul", "choice" or "score"'


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and (
        part in {"noul", "choice", "score"} or "[" in part or part.startswith("function-")
    )


def parse_job(raw: Any, limits: Limits | None = None) -> AnyJob:
    """Validate a job from a dict, a JSON string or bytes; ``JobInvalid`` names every bad field.

    Text is read as strict JSON (``shared.strict_json``), and every job is first checked
    against the input limits (``shared.limits``, the process's settings unless ``limits``):
    a job that breaks one is rejected naming the field and the limit, before pydantic (or
    anything else) walks it.
    """
    if isinstance(raw, bytes | bytearray | str):
        try:
            raw = strict_json.loads(raw)
        except NotStrictJSON as exc:
            raise JobInvalid([FieldProblem("(body)", str(exc))]) from None
    job_id = _readable_id(raw)
    refused = job_problems(raw, limits)
    if refused:
        raise JobInvalid(refused, job_id)
    if not isinstance(raw, dict):
        raise JobInvalid([FieldProblem("(job)", f"a job is a JSON object, not {_json_name(raw)}")])
    if REFUSED_KEY in raw:
        raise JobInvalid(refused_problems(raw), job_id)
    kind = raw.get("kind", "decide")
    adapter = _ADAPTERS.get(kind) if isinstance(kind, str) else None
    if adapter is None:
        expected = " or ".join(repr(k) for k in JOB_KINDS)
        problem = FieldProblem("kind", f"unknown kind {repr(kind)[:60]}; expected {expected}")
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
    if isinstance(job, MenuJob) and job.work is not None and job.max_retries != TURN_RETRIES:
        # Work first, decide last has exactly one re-pick (seed 000, "Retry on parse
        # failure"): a different count would be silently ignored, so it is refused.
        problems.append(FieldProblem(
            "max_retries",
            f"a menu job with work has exactly {TURN_RETRIES} retry; leave max_retries out "
            f"(or set it to {TURN_RETRIES})",
        ))
    if job is not None and job.kind != "decide" and job.audit_rate is not None:
        # Audits label decide answers by question id (shared.labels); silently ignoring the
        # field on another kind would promise labels that never come.
        problems.append(FieldProblem(
            "audit_rate", f"audits are for decide jobs; a {job.kind} job's results are not "
            "labelled: leave audit_rate out"
        ))
    if problems or job is None:
        raise JobInvalid(problems, job_id)
    assert isinstance(job, JOB_TYPES)
    return job


def _readable_id(raw: Any) -> str | None:
    """The job's id when it is one a reply can carry (short, printable), else None."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(raw, strict_json.DuplicateKeys) and "id" in raw.duplicates:
        return None  # which of its ids? none: the rejection is named by its digest
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable():
        return value
    return None


def _json_name(value: Any) -> str:
    return {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def job_kind(raw: Any) -> str | None:
    """The ``kind`` a raw job says it is, without validating it (``None``: nothing readable)."""
    if isinstance(raw, bytes | bytearray | str):
        try:
            raw = strict_json.loads(raw)
        except NotStrictJSON:
            return None
    kind = raw.get("kind", "decide") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else None


def job_deadline(
    job: AnyJob, *, default_s: float, ceiling_s: float, now: datetime | None = None
) -> datetime:
    """The job's absolute deadline: its own, or submission (or now) plus its timeout or the default.

    A deadline further away than the ceiling is cut to the ceiling. ``now`` is the clock
    that judges deadlines (the worker passes the ledger's); a producer's ``submitted_at``
    later than it plus ``SUBMITTED_AT_ALLOWANCE_S`` is clamped to ``now``, so no producer's
    clock can push a deadline, or the lease after it, into the future.
    """
    now = now or datetime.now(UTC)
    start = job.submitted_at or now
    if start > now + timedelta(seconds=SUBMITTED_AT_ALLOWANCE_S):
        start = now  # a producer's clock far ahead (or a forged stamp): ours counts
    if job.deadline is not None:
        deadline = job.deadline
    else:
        deadline = start + timedelta(seconds=job.timeout_s or default_s)
    return min(deadline, start + timedelta(seconds=ceiling_s))


def stored_job(text: str) -> dict[str, Any] | None:
    """The job a ledger row's stored body holds, as first delivered; None if it no longer
    reads as a job (damaged, or of a shape this release refuses): what the reaper may not
    run, and what a redelivery of it may not reject (``worker.delivery.lifecycle``)."""
    try:
        raw = json.loads(text)
        parse_job(raw)
    except (ValueError, RecursionError, JobInvalid):
        return None
    return raw if isinstance(raw, dict) else None
