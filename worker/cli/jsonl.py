"""Reading a batch file: one job per line, each read as strict JSON on its own.

A line that cannot be read (not UTF-8, a byte order mark, not JSON, nested too deep to
parse) never stops the others: it is kept as its bytes, so that validation rejects it with
the reason (``(body): not UTF-8: byte 0xff at offset 12``) and nothing is sent for it. A line
that reads but is not strict JSON (NaN, a duplicate key, a lone surrogate) is kept as read,
marked, for validation to reject naming the field (``shared.strict_json``). Blank lines and
``//`` comments are skipped; every job keeps its 1-based line number for the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import strict_json
from shared.errors import FieldProblem, NotStrictJSON

__all__ = [
    "JobLine",
    "line_number",
    "line_of",
    "plain_reason",
    "read_jobs",
    "read_lines",
    "unreadable_problems",
]


@dataclass(frozen=True)
class JobLine:
    """One job of a batch file: its line number, what was read, and why it could not be."""

    number: int
    job: Any
    unreadable: str | None = None


def read_lines(path: Path) -> list[JobLine]:
    lines: list[JobLine] = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            data = line.strip(b" \t\r\n")
            if not data or data.startswith(b"//"):
                continue
            try:
                job = strict_json.loads(data)
            except NotStrictJSON as exc:
                lines.append(JobLine(number, bytes(data), str(exc)))
                continue
            if isinstance(job, strict_json.DuplicateKeys):
                # Kept as text: a producer's stamps would copy it into a plain dict.
                names = ", ".join(repr(k) for k in job.duplicates[:3])
                lines.append(JobLine(number, bytes(data), f"names a field twice ({names})"))
                continue
            lines.append(JobLine(number, job))
    return lines


def read_jobs(path: Path) -> list[Any]:
    return [line.job for line in read_lines(path)]


def line_of(job_id: str, lines: list[JobLine]) -> str:
    """Where a rejected job of a report came from, by its id: ``line 12`` (reports keep the
    lines without an id apart, by position: an id may read ``line-1``)."""
    numbers = [str(line.number) for line in lines if _id(line.job) == job_id]
    return f"line {', '.join(numbers[:5])}" if numbers else "line ?"


def line_number(job_id: str, lines: list[JobLine]) -> JobLine | None:
    """The one line a rejected job of a report came from, by its id (None: not one)."""
    found = [line for line in lines if _id(line.job) == job_id]
    return found[0] if len(found) == 1 else None


#: Pydantic's words for a question whose ``type`` is missing or not one of the known ones.
_NO_TAG = "Unable to extract tag using discriminator"
_BAD_TAG = "does not match any of the expected tags"
_SPREAD = ("{", "[", "}", "]", "},", "],")


def plain_reason(problems: list[FieldProblem], line: JobLine | None) -> str:
    """The problems as a person reads them: what the line is and what to do, rather than a
    parser's words ("a JSON array; put one job object per line")."""
    text = _text(line.job) if line is not None else None
    if text is not None:
        stripped = text.strip()
        if stripped in _SPREAD or (stripped.startswith('"') and '":' in stripped[:80]):
            return (
                "part of a job spread over several lines (pretty-printed JSON?); "
                "put each whole job object on one line"
            )
    if line is not None and isinstance(line.job, list):
        return "a JSON array; put one job object per line"
    if line is not None and isinstance(line.job, str | int | float | bool):
        kind = {"str": "string", "bool": "true or false"}.get(type(line.job).__name__, "number")
        return f"a JSON {kind}, not a job object; put one job object per line"
    said = []
    for problem in problems:
        message = problem.message
        if _NO_TAG in message or _BAD_TAG in message:
            message = 'has no known "type": give one of noul, choice, score'
        said.append(f"{problem.field}: {message}")
    return "; ".join(said)


def _text(job: Any) -> str | None:
    if isinstance(job, bytes | bytearray):
        return bytes(job).decode("utf-8", "replace")
    return None


def unreadable_problems(lines: Iterable[JobLine]) -> list[tuple[int, FieldProblem]]:
    return [
        (line.number, FieldProblem("(body)", line.unreadable))
        for line in lines
        if line.unreadable is not None
    ]


def _id(job: Any) -> Any:
    return job.get("id") if isinstance(job, dict) else None
