"""Hostile jobs for the hostile-input suite, as hypothesis strategies.

A ``Case`` is drawn once and built twice (``build(job_id)``): once for ``Client`` (a dict, or
the text or bytes a producer might hand it) and once as the JSON text a raw publish carries,
so that the same hostile content goes through both entrances. Each says what must come of it:
``rejected`` (naming a field), ``answered`` (a result or an escalation), or ``either`` (only
that it ends, the same way on both paths). Hostile content is built in Python from a few
drawn parameters, so that generating a thousand of them takes well under a second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st

from shared.limits import MAX_MENU_OPTIONS, MAX_QUESTIONS, MAX_SCHEMA_FIELDS, MAX_SIFT_ITEMS

__all__ = ["Case", "Hostile", "cases"]

Expect = Literal["rejected", "answered", "either"]
QUESTIONS: dict[str, Any] = {
    "urgent": {"type": "noul", "instructions": "Does this ticket convey urgency?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": "Payments", "sales": None},
    },
}


@dataclass
class Hostile:
    job_id: str
    category: str
    value: Any  # what Client gets: a dict, a str or bytes
    text: bytes | None  # what a raw publish carries in its jobs list (None: not JSON)
    expect: Expect
    #: The raw text makes a whole message undecodable: published alone, dropped, no reply.
    alone: bool = False


@dataclass
class Case:
    category: str
    build: Callable[[str, str], Hostile]  # (job id, reply stream) -> the hostile job


def base(job_id: str, stream: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "decide",
        "reply_to": stream,
        "batch": "hostile",
        "state": {"subject": f"ticket {job_id}", "body": "The invoice is wrong."},
        "questions": QUESTIONS,
        "metadata": {"n": job_id},
    }


def _text(job: dict[str, Any], snippets: dict[str, str] | None = None) -> bytes:
    """The job's JSON (NaN and surrogates as Python writes them), placeholders replaced."""
    text = json.dumps(job, ensure_ascii=True, allow_nan=True)
    for name, snippet in (snippets or {}).items():
        text = text.replace(json.dumps(name), snippet)
    return text.encode()


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def _nested_text(depth: int) -> str:
    opens = "".join('{"a": ' if i % 2 else "[" for i in reversed(range(depth)))
    closes = "".join("}" if i % 2 else "]" for i in range(depth))
    return opens + "1" + closes


# Where a nested value goes, and how many levels the job adds above it.
_DEEP_AT = {"state": 1, "metadata": 2, "instructions": 3}


@st.composite
def _deep(draw: st.DrawFn) -> Case:
    where = draw(st.sampled_from(sorted(_DEEP_AT)))
    depth = draw(st.sampled_from([5, 50, 90, 150, 300, 600, 1_500, 5_000]))
    total = _DEEP_AT[where] + depth
    expect: Expect = "rejected" if total > 100 else "answered"
    if where == "instructions":
        expect = "rejected" if total > 100 else "either"

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        placeholder = "@@DEEP@@"
        if where == "state":
            job["state"] = placeholder
        elif where == "metadata":
            job["metadata"] = {"x": placeholder}
        else:
            questions = json.loads(json.dumps(QUESTIONS))
            questions["urgent"]["instructions"] = placeholder
            job["questions"] = questions
        text = _text(job, {placeholder: _nested_text(depth)})
        value = json.loads(json.dumps(job).replace(json.dumps(placeholder), "null"))
        if where == "state":
            value["state"] = _nested(depth)
        elif where == "metadata":
            value["metadata"]["x"] = _nested(depth)
        else:
            value["questions"]["urgent"]["instructions"] = _nested(depth)
        return Hostile(job_id, f"deep-{where}-{depth}", value, text, expect)

    return Case(f"deep-{where}-{depth}", build)


@st.composite
def _not_finite(draw: st.DrawFn) -> Case:
    number = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    where = draw(st.sampled_from(["state", "metadata", "escalate_below"]))

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        if where == "state":
            job["state"] = {"x": [1, number]}
        elif where == "metadata":
            job["metadata"] = {"score": number}
        else:
            job["questions"] = {"urgent": {**QUESTIONS["urgent"], "escalate_below": number}}
        return Hostile(job_id, f"not-finite-{where}", job, _text(job), "rejected")

    return Case(f"not-finite-{where}", build)


@st.composite
def _surrogate(draw: st.DrawFn) -> Case:
    text = draw(st.sampled_from(["\ud800", "a\udfffb", "\udbff"]))
    as_key = draw(st.booleans())

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        job["state"] = {text: "value"} if as_key else {"body": text}
        return Hostile(job_id, "surrogate", job, _text(job), "rejected")

    return Case("surrogate", build)


@st.composite
def _text_only(draw: st.DrawFn) -> Case:
    """What only text can carry: duplicate keys, a 1e400, a BOM, bytes that are not UTF-8."""
    kind = draw(st.sampled_from(["dup-state", "dup-field", "1e400", "bom", "latin-1"]))

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        job["state"] = "@@S@@"
        snippet = {
            "dup-state": '{"a": 1, "a": 2}',
            "dup-field": '"x", "metadata": {}, "metadata": {"n": 1}',
            "1e400": "[1e400]",
            "bom": '"fine"',
            "latin-1": '"caf\u00e9"',
        }[kind]
        text = _text(job, {"@@S@@": snippet})
        if kind == "bom":
            text = b"\xef\xbb\xbf" + text
        if kind == "latin-1":
            text = text.replace("café".encode(), "café".encode("latin-1"))
        alone = kind in ("bom", "latin-1")
        return Hostile(job_id, kind, text if alone else text.decode(), text, "rejected", alone)

    return Case(kind, build)


@st.composite
def _oversize(draw: st.DrawFn) -> Case:
    kind = draw(
        st.sampled_from(
            [
                "metadata-string",
                "metadata-total",
                "key",
                "questions",
                "items",
                "schema",
                "options",
                "big-int",
            ]
        )
    )

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        if kind == "metadata-string":
            job["metadata"] = {"blob": "x" * 70_000}
        elif kind == "metadata-total":
            job["metadata"] = {f"k{i}": "y" * 10_000 for i in range(8)}
        elif kind == "key":
            job["metadata"] = {"k" * 70_000: 1}
        elif kind == "questions":
            job["questions"] = {
                f"q{i}": {"type": "noul", "instructions": "?"} for i in range(MAX_QUESTIONS + 1)
            }
        elif kind == "items":
            job = {
                **job,
                "kind": "sift",
                "items": ["i"] * (MAX_SIFT_ITEMS + 1),
                "question": {"type": "noul", "instructions": "Keep?"},
            }
            del job["questions"], job["state"]
        elif kind in ("schema", "options"):
            fields = [{"name": f"f{i}", "type": "str"} for i in range(MAX_SCHEMA_FIELDS + 1)]
            options = (
                [{"name": "big", "kind": "schema", "schema": {"type": "object", "fields": fields}}]
                if kind == "schema"
                else [
                    {"name": f"o{i}", "kind": "value", "value": i}
                    for i in range(MAX_MENU_OPTIONS + 1)
                ]
            )
            job = {**job, "kind": "menu", "prompt": "Pick one", "options": options}
            del job["questions"], job["state"]
        else:
            job["state"] = {"n": 10**150}
        return Hostile(job_id, f"oversize-{kind}", job, _text(job), "rejected")

    return Case(f"oversize-{kind}", build)


@st.composite
def _python_only(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["set", "bytes", "object", "int-key", "tuple"]))

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        value = {"set": {1, 2}, "bytes": b"raw", "object": object(), "tuple": (1, "two")}
        if kind == "int-key":
            job["metadata"] = {1: "one"}
        else:
            job["metadata"] = {"v": value[kind]}
        expect: Expect = "answered" if kind == "tuple" else "rejected"
        return Hostile(job_id, f"python-{kind}", job, None, expect)

    return Case(f"python-{kind}", build)


_WRONG: dict[str, Any] = {
    "kind": "launch",
    "questions": [],
    "state": 5,
    "colour": "blue",
    "timeout_s": -1,
    "deadline": "yesterday",
    "batch": "b" * 201,
    "metadata": [1, 2],
    "provider": "",
}


@st.composite
def _wrong(draw: st.DrawFn) -> Case:
    field = draw(st.sampled_from(sorted(_WRONG)))

    def build(job_id: str, stream: str) -> Hostile:
        job = {**base(job_id, stream), field: _WRONG[field]}
        return Hostile(job_id, f"wrong-{field}", job, _text(job), "rejected")

    return Case(f"wrong-{field}", build)


@st.composite
def _fine(draw: st.DrawFn) -> Case:
    """Valid jobs with awkward but legal content: these must be answered."""
    body = draw(
        st.sampled_from(
            [
                "plain",
                "emoji 🧾✅",
                "line\u2028sep",
                "nul\x00byte",
                "rtl \u202e",
                "e\u0301",
                '\\"quoted"',
                "x" * 50_000,
            ]
        )
    )

    def build(job_id: str, stream: str) -> Hostile:
        job = base(job_id, stream)
        job["state"] = {"body": body, "ключ": [None, True, 1.5, -0.0, 10**20]}
        return Hostile(job_id, "fine", job, _text(job), "answered")

    return Case("fine", build)


def cases() -> st.SearchStrategy[Case]:
    return st.one_of(
        _deep(),
        _not_finite(),
        _surrogate(),
        _text_only(),
        _oversize(),
        _python_only(),
        _wrong(),
        _fine(),
    )
