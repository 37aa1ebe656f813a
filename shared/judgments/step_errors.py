"""One line per distinct error of a job's many calls, with how many requests and items it hit.

A sift of 10,000 items is 100 requests; when they all fail the same way, its escalation used
to repeat the same error 100 times (issue 16). Here each distinct error appears once, the step
prefix and the provider's per-request ``ref_id`` that made every copy different removed (each
receipt keeps its step, ``error_code`` and ``ref_id``), with its count of requests and items,
and the step when only one request had it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["MAX_ERROR_CHARS", "distinct_errors"]

#: One error's text at most: a provider's message can carry a whole response body.
MAX_ERROR_CHARS = 300
#: What ``worker.providers.transport`` appends to a provider's error; every request has its own.
_REF_ID = re.compile(r";?\s*ref_id \S+")


@dataclass
class _Seen:
    steps: list[str] = field(default_factory=list)
    items: int = 0


def distinct_errors(failures: Iterable[tuple[str, int, str]]) -> str:
    """``failures`` as ``(step, items, detail)``: each distinct detail once, in first-seen order."""
    seen: dict[str, _Seen] = {}
    for step, items, detail in failures:
        text = _without_step(step, detail)
        if not text:
            continue
        entry = seen.setdefault(text, _Seen())
        entry.steps.append(step)
        entry.items += items
    return "; ".join(_line(text, entry) for text, entry in seen.items())


def _without_step(step: str, detail: str) -> str:
    text = detail.strip()
    if text.startswith(step) and text[len(step) : len(step) + 1] in (":", " "):
        text = text[len(step) :].lstrip(": ").strip()
    text = _REF_ID.sub("", text).strip()
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1].rstrip() + "…"
    return text


def _line(text: str, entry: _Seen) -> str:
    items = f"{entry.items} item{'' if entry.items == 1 else 's'}"
    if len(entry.steps) == 1:
        return f"{entry.steps[0]}: {text} ({items})"
    return f"{text} ({len(entry.steps)} requests, {items})"
