"""The one set of input limits, and the one check of them, used at every entrance.

``job_problems`` is called by ``shared.job_parsing.parse_job`` (so by ``Client``, ``decisions
submit``, ``decisions run`` and the worker's pool) and by the worker's guard in its main
process, on the decoded body, before a message is handed to the pool. It walks each field of
a job with ``shared.json_measure.measure`` (an explicit stack: a hostile value thousands of
levels deep costs a walk to the limit, never a RecursionError) and names each field that is
not strict JSON or breaks a limit, with the limit and the setting that changes it.

The limits (defaults; ``Limits`` fields have a ``DECISIONS_MAX_*`` setting):

=========================  =========  ================================================
limit                      default    what it bounds (setting)
=========================  =========  ================================================
``Limits.depth``           100        nesting of a job's JSON, from the job object
                                      (DECISIONS_MAX_JOB_DEPTH)
``Limits.job_bytes``       40 MiB     a job's JSON in all (..._JOB_BYTES)
``Limits.state_bytes``     32 MiB     a state; a sift's items together (..._STATE_BYTES)
``Limits.metadata_bytes``  64 KiB     metadata, echoed in every reply (..._METADATA_BYTES)
``Limits.context_bytes``   1 MiB      a menu's context (..._CONTEXT_BYTES)
``Limits.options_bytes``   1 MiB      a menu's options, schemas included (..._OPTIONS_BYTES)
``Limits.questions_bytes`` 1 MiB      questions, a sift's question, routes (..._QUESTIONS_BYTES)
``Limits.string_bytes``    64 KiB     one string or key outside a state, items, a prompt
                                      and a context (..._STRING_BYTES)
(a message on the queue)   64 MiB     a Celery message, base64 in kombu's envelope; a worker
                                      drops a longer one undecoded (..._MESSAGE_BYTES)
``MAX_PROMPT_CHARS``       1,000,000  a menu's prompt, in characters
``MAX_QUESTIONS``          100        questions of a decide job
``MAX_CHOICE_OPTIONS``     255        options of a choice question; routes of a route job
``MAX_SIFT_ITEMS``         10,000     items of a sift job
``MAX_MENU_OPTIONS``       256        options of a menu job
``MAX_SCHEMA_FIELDS``      1,000      type nodes (fields) of one option's schema
``MAX_ID_CHARS``           200        a job id, batch, reply stream, field name
``PROVIDER_STATE_BYTES``   96,000     a state sent to parallel (its canonical JSON)
``MAX_BUDGET_USD``         1,000,000  a batch's ``budget_usd`` (and ``decisions budget set``)
``MAX_JOB_IMAGES``         16         images of a decide job (``images``; their base64
                                      counts toward ..._STATE_BYTES)
``MAX_IMAGE_BYTES``        16 MiB     one image, decoded (the System One hosts' limit)
=========================  =========  ================================================

Sizes are the bytes of compact JSON in UTF-8 (``shared.strict_json.dumps``), escapes and
digits included, so a limit holds to the byte; a provider's own limit is measured again on
what it is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Final

from shared.canonical import canonical_bytes
from shared.errors import FieldProblem
from shared.json_measure import measure, string_size
from shared.settings import Settings, get_settings
from shared.strict_json import DuplicateKeys

__all__ = [
    "MAX_BUDGET_USD",
    "MAX_CHOICE_OPTIONS",
    "MAX_ID_CHARS",
    "MAX_IMAGE_BYTES",
    "MAX_JOB_IMAGES",
    "MAX_MENU_OPTIONS",
    "MAX_PROMPT_CHARS",
    "MAX_QUESTIONS",
    "MAX_SCHEMA_FIELDS",
    "MAX_SIFT_ITEMS",
    "PROVIDER_STATE_BYTES",
    "REFUSED_KEY",
    "Limits",
    "current_limits",
    "echoable_metadata",
    "job_problems",
    "refused_job",
    "refused_problems",
]

KIB: Final = 1024
MIB: Final = 1024 * KIB

#: A menu job's prompt, in characters.
MAX_PROMPT_CHARS: Final = 1_000_000
#: Questions of one decide job (Parallel's own limit; every question is rendered each request).
MAX_QUESTIONS: Final = 100
#: Options of a choice question, and routes of a route job (the System One wire limit).
MAX_CHOICE_OPTIONS: Final = 255
#: Items of one sift job (each is one question on the wire).
MAX_SIFT_ITEMS: Final = 10_000
#: Options of one menu job (each is rendered into every prompt).
MAX_MENU_OPTIONS: Final = 256
#: Type nodes (each field, list item type, dict value type) of one schema option's schema.
MAX_SCHEMA_FIELDS: Final = 1_000
#: A job id, batch name or reply stream, in characters.
MAX_ID_CHARS: Final = 200
#: A batch's budget, in USD: a bound that keeps the ledger's sums exact to far below a cent.
MAX_BUDGET_USD: Final = 1_000_000.0
#: Images of one decide job, and one image's decoded bytes (the System One hosts' limit).
MAX_JOB_IMAGES: Final = 16
MAX_IMAGE_BYTES: Final = 16 * MIB
#: A provider's own state limit (bytes of the state's canonical JSON), checked at submit too.
PROVIDER_STATE_BYTES: Final[Mapping[str, int]] = {"parallel": 96_000}
#: The key of a job the worker's guard replaced by what is left of it and its problems.
REFUSED_KEY: Final = "(refused)"
#: Problems kept in a refused job (and their message length): a bounded stub whatever came.
_MAX_PROBLEMS = 20
_MAX_PROBLEM_CHARS = 300


@dataclass(frozen=True)
class Limits:
    """The limits that have a setting (see the module doc); the rest are constants."""

    depth: int = 100
    job_bytes: int = 40 * MIB
    state_bytes: int = 32 * MIB
    metadata_bytes: int = 64 * KIB
    context_bytes: int = 1 * MIB
    options_bytes: int = 1 * MIB
    questions_bytes: int = 1 * MIB
    string_bytes: int = 64 * KIB
    #: The provider of a decide job that names none (its state limit applies).
    default_provider: str | None = None
    provider_state_bytes: Mapping[str, int] = field(
        default_factory=lambda: dict(PROVIDER_STATE_BYTES)
    )

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            depth=settings.max_job_depth,
            job_bytes=settings.max_job_bytes,
            state_bytes=settings.max_state_bytes,
            metadata_bytes=settings.max_metadata_bytes,
            context_bytes=settings.max_context_bytes,
            options_bytes=settings.max_options_bytes,
            questions_bytes=settings.max_questions_bytes,
            string_bytes=settings.max_string_bytes,
            default_provider=settings.default_provider,
        )


_CACHE: list[tuple[Any, Limits]] = []


def current_limits() -> Limits:
    """The limits of this process's settings (``get_settings()``), built once per settings."""
    settings = get_settings()
    if not _CACHE or _CACHE[0][0] is not settings:
        _CACHE[:] = [(settings, Limits.from_settings(settings))]
    return _CACHE[0][1]


# field -> (the Limits attribute bounding its size, whether string_bytes bounds its strings,
# the setting that changes it)
_FIELDS: dict[str, tuple[str, bool, str]] = {
    "state": ("state_bytes", False, "DECISIONS_MAX_STATE_BYTES"),
    "items": ("state_bytes", False, "DECISIONS_MAX_STATE_BYTES"),
    # Base64 images are part of what a decision is about: bounded with the state.
    "images": ("state_bytes", False, "DECISIONS_MAX_STATE_BYTES"),
    "metadata": ("metadata_bytes", True, "DECISIONS_MAX_METADATA_BYTES"),
    "context": ("context_bytes", False, "DECISIONS_MAX_CONTEXT_BYTES"),
    "options": ("options_bytes", True, "DECISIONS_MAX_OPTIONS_BYTES"),
    "questions": ("questions_bytes", True, "DECISIONS_MAX_QUESTIONS_BYTES"),
    "question": ("questions_bytes", True, "DECISIONS_MAX_QUESTIONS_BYTES"),
    "routes": ("questions_bytes", True, "DECISIONS_MAX_QUESTIONS_BYTES"),
    "instructions": ("questions_bytes", True, "DECISIONS_MAX_QUESTIONS_BYTES"),
    "prompt": ("job_bytes", False, "DECISIONS_MAX_JOB_BYTES"),
}
#: Fields the Python API may give as datetimes (pydantic reads them; JSON carries text).
_TYPED = frozenset({"deadline", "submitted_at"})


def job_problems(raw: Any, limits: Limits | None = None) -> list[FieldProblem]:
    """Every field of ``raw`` (a decoded job) that is not strict JSON or breaks a limit.

    Runs before any other validation, on anything (a job that is not an object is measured
    whole, as ``(job)``); an empty list means the job is safe to validate, serialise and pass
    between processes, not that it is valid.
    """
    limits = limits or current_limits()
    if not isinstance(raw, dict):
        found = measure(raw, max_depth=limits.depth, max_bytes=limits.job_bytes)
        if found.problem is None:
            return []
        return [FieldProblem("(job)", _with_setting(found.problem[1], limits))]
    problems: list[FieldProblem] = []
    if isinstance(raw, DuplicateKeys):
        names = ", ".join(repr(k)[:40] for k in raw.duplicates[:3])
        problems.append(FieldProblem("(job)", f"names a field twice ({names})"))
    total = 1 if raw else 2  # the braces, less the comma counted with every field but one
    for key, value in raw.items():
        if not isinstance(key, str) or len(key) > MAX_ID_CHARS:
            problems.append(FieldProblem("(job)", "a field name that is not a short string"))
            continue
        total += string_size(key) + 2  # "key": and a comma
        if key in _TYPED and isinstance(value, date):
            total += len(value.isoformat()) + 2
            continue
        rule = _FIELDS.get(key)
        if rule is None and type(value) is str and value.isascii():
            if len(value) > limits.string_bytes:
                problems.append(
                    FieldProblem(
                        key,
                        _with_setting(
                            f"a string of {len(value)} bytes; at most {limits.string_bytes}",
                            limits,
                        ),
                    )
                )
            total += string_size(value)  # the common short field (id, kind...): no walk
            continue
        bound, strings, setting = rule or ("string_bytes", True, "")
        max_bytes = getattr(limits, bound)
        found = measure(
            value,
            max_depth=limits.depth - 1,  # the job object is the first level
            max_bytes=max_bytes,
            max_string=limits.string_bytes if strings else None,
            path=key,
        )
        total += found.size
        if found.problem is not None:
            where, what = found.problem
            problems.append(FieldProblem(where or key, _with_setting(what, limits, setting)))
            continue
        problems += _count_problems(key, value, limits)
    if total > limits.job_bytes and not problems:
        problems.append(
            FieldProblem(
                "(job)",
                f"{total} bytes of JSON; at most {limits.job_bytes} (DECISIONS_MAX_JOB_BYTES)",
            )
        )
    if not problems:
        problems += _provider_problems(raw, limits)
    return problems


def _with_setting(what: str, limits: Limits, setting: str = "") -> str:
    if what.startswith("nested more than"):
        return (
            f"nested more than {limits.depth} levels deep, counted from the job "
            "(DECISIONS_MAX_JOB_DEPTH)"
        )
    if "bytes of JSON" in what and setting:
        return f"{what} ({setting})"
    if "a string of" in what or "a key of" in what:
        return f"{what} (DECISIONS_MAX_STRING_BYTES)"
    return what


def _count_problems(key: str, value: Any, limits: Limits) -> list[FieldProblem]:
    if key == "questions" and isinstance(value, dict) and len(value) > MAX_QUESTIONS:
        return [FieldProblem(key, f"{len(value)} questions; at most {MAX_QUESTIONS}")]
    if key == "items" and isinstance(value, list) and len(value) > MAX_SIFT_ITEMS:
        return [FieldProblem(key, f"{len(value)} items; at most {MAX_SIFT_ITEMS}")]
    if key == "routes" and isinstance(value, dict) and len(value) > MAX_CHOICE_OPTIONS:
        return [FieldProblem(key, f"{len(value)} routes; at most {MAX_CHOICE_OPTIONS}")]
    if key != "options" or not isinstance(value, list):
        return []
    if len(value) > MAX_MENU_OPTIONS:
        return [FieldProblem(key, f"{len(value)} options; at most {MAX_MENU_OPTIONS}")]
    problems = []
    for i, option in enumerate(value):
        schema = option.get("schema") if isinstance(option, dict) else None
        if schema is None:
            continue
        nodes = measure(schema, max_depth=limits.depth).objects
        if nodes > MAX_SCHEMA_FIELDS:
            problems.append(
                FieldProblem(
                    f"options[{i}].schema",
                    f"{nodes} type nodes (fields); at most {MAX_SCHEMA_FIELDS}",
                )
            )
    return problems


def _provider_problems(raw: dict[str, Any], limits: Limits) -> list[FieldProblem]:
    """A provider's own state limit, for a decide or route job naming it (or by default)."""
    if raw.get("kind", "decide") not in ("decide", "route") or "state" not in raw:
        return []
    provider = raw.get("provider") or limits.default_provider
    bound = limits.provider_state_bytes.get(provider) if isinstance(provider, str) else None
    state = raw["state"]
    if bound is None or not isinstance(state, str | dict | list):
        return []
    size = len(state.encode()) if isinstance(state, str) else len(canonical_bytes(state))
    if size <= bound:
        return []
    return [FieldProblem("state", f"{size} bytes; {provider} takes at most {bound}")]


def refused_job(raw: Any, problems: list[FieldProblem]) -> dict[str, Any]:
    """What the worker's guard hands its pool instead of a job that broke a limit: the job's
    id, reply stream, batch and kind when they are short strings (so that its rejection
    reaches the producer), its metadata when that is within limits, and its problems."""
    stub: dict[str, Any] = {}
    if isinstance(raw, dict):
        for key in ("id", "reply_to", "batch", "kind"):
            value = raw.get(key)
            if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
                stub[key] = value
        metadata = echoable_metadata(raw.get("metadata"))
        if metadata:
            stub["metadata"] = metadata
    stub[REFUSED_KEY] = [p.as_dict() for p in problems[:_MAX_PROBLEMS]]
    return stub


def echoable_metadata(metadata: Any, limits: Limits | None = None) -> dict[str, Any]:
    """``metadata`` when a reply can echo it (strict JSON within its limits), else ``{}``."""
    if not isinstance(metadata, dict):
        return {}
    limits = limits or current_limits()
    found = measure(
        metadata,
        max_depth=limits.depth - 1,
        max_bytes=limits.metadata_bytes,
        max_string=limits.string_bytes,
    )
    return metadata if found.problem is None else {}


def refused_problems(raw: dict[str, Any]) -> list[FieldProblem]:
    """The problems a refused job carries (bounded, whatever a producer put there)."""
    listed = raw.get(REFUSED_KEY)
    problems = []
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, dict):
            where, what = item.get("field"), item.get("message")
            if isinstance(where, str) and isinstance(what, str):
                problems.append(FieldProblem(where[:_MAX_PROBLEM_CHARS], what[:_MAX_PROBLEM_CHARS]))
    return problems[:_MAX_PROBLEMS] or [FieldProblem(REFUSED_KEY, "refused by the worker")]
