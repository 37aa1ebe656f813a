"""Every option form and schema form of the seed's tables, written in the Python notation,
encoded by the client (``MenuJob.of``), carried as JSON, decoded by the worker and resolved:
the same menu the Python API renders, and the same result it returns for the same pick."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

from __future__ import annotations

import json
from typing import Any, Optional

import pytest

from shared.errors import JobInvalid
from shared.job_parsing import parse_job
from shared.jobs import MenuJob
from shared.menus import Handler, Menu, build_menu, make
from shared.menus.faux import ScriptedRuntime, pick_text
from shared.replies import ResultMessage
from tests.menus_worker.handlers import t_fallback, t_sentiment
from tests.menus_worker.support import REPLY_TO, Harness
from worker.kinds.menus.handlers import registered


class AbortSignal:
    pass


PLAN_SCHEMA = {
    "steps": [{"action": str, "target": str}],  # a list of nested objects
    "rationale": str,  # a scalar
    "summary": "one line for the customer",  # a described str
    "priority": {"type": int, "description": "1 is highest", "options": [1, 2, 3]},  # meta-spec
    "owner": {"name": str, "team": {"type": str, "options": ["billing", "tech"]}},  # nested
    "score": float,
    "urgent": bool,
    "tags": [str],
    "limit": Optional[int],
}

DICT_FORM: dict[str, Any] = {
    "analyze": t_sentiment,  # function option
    "fallback": (t_fallback, "When nothing else fits."),  # (callable, "desc")
    "done": "CONVERSATION_OVER",  # value
    "abort": ({"signal": "abort"}, "pick when stuck"),  # (value, "desc")
    "nothing": None,  # None is a value
    "emit_plan": ("Produce a plan.", PLAN_SCHEMA),  # ("desc", schema)
    "refund": Handler("t_refund"),  # a handler the client cannot import
}

LIST_FORM: list[Any] = [
    t_sentiment,  # named by __name__
    (t_fallback, "When nothing else fits."),
    "skip",  # a value option whose value is its name
    ("later", "Come back to it later."),
    ("triage", "Sort the ticket.", {"queue": {"type": str, "options": ["a", "b"]}, "notes": [str]}),
]

PICKS: dict[str, dict[str, Any]] = {
    "analyze": {"message": "Broken again!"},
    "t_sentiment": {"message": "fine", "strict": True},
    "fallback": {},
    "t_fallback": {},
    "done": {},
    "abort": {},
    "nothing": {},
    "skip": {},
    "later": {},
    "refund": {"order_id": "A-7", "amount": 1.5},
    "triage": {"queue": "b", "notes": ["x", "y"], "dropped": 1},
    "emit_plan": {
        "steps": [{"action": "email", "target": "Ana", "extra": "dropped"}],
        "rationale": "r",
        "summary": "s",
        "priority": 2,
        "owner": {"name": "Bo", "team": "tech"},
        "score": 3,
        "urgent": False,
        "tags": ["late"],
        "limit": None,
    },
}


def wire(options: Any) -> dict[str, Any]:
    job = MenuJob.of(
        prompt="Pick the next step.",
        options=options,
        id="x",
        reply_to=REPLY_TO,
        context={"customer": "Ana"},
    )
    # What travels: plain JSON, no Python objects.
    raw: dict[str, Any] = json.loads(job.model_dump_json(exclude_none=True))
    return raw


def python_menu(options: Any) -> Menu:
    """The menu as the Python API builds it, with the worker's handlers to resolve names."""
    return build_menu(options, handlers=registered())


@pytest.mark.parametrize("options", [DICT_FORM, LIST_FORM], ids=["dict", "list"])
def test_the_worker_renders_the_menu_the_python_api_renders(harness: Harness, options: Any) -> None:
    raw = wire(options)
    assert all(o["kind"] in {"handler", "value", "schema"} for o in raw["options"])
    job = parse_job(raw)
    assert isinstance(job, MenuJob)
    plan = harness.menus.prepare(job)
    assert plan.menu.text == python_menu(options).text
    assert plan.menu.fingerprint == python_menu(options).fingerprint


def test_the_rendered_menu_shows_every_schema_form() -> None:
    text = python_menu(DICT_FORM).text
    assert "steps: list[{action: str, target: str}]" in text
    assert "summary: str (required) - one line for the customer" in text
    assert "priority: int (required) - 1 is highest; one of: 1, 2, 3" in text
    assert "owner: {name: str, team: str}" in text
    assert "limit: int | null" in text
    assert "- analyze(message: str, strict: bool = false)" in text
    assert "- refund(order_id: str, amount: float)" in text  # customer is injected: hidden


@pytest.mark.parametrize("options", [DICT_FORM, LIST_FORM], ids=["dict", "list"])
async def test_each_option_resolves_as_the_python_api_resolves_it(
    harness: Harness, options: Any
) -> None:
    raw = wire(options)
    kind = "dict" if isinstance(options, dict) else "list"
    for option in raw["options"]:
        name = option["name"]
        job_id = f"{kind}-{name}"
        harness.pick(job_id, "pick.0", name, PICKS[name])
        assert await harness.run({**raw, "id": job_id}) == "result", harness.terminal(job_id)
        message = harness.terminal(job_id)
        assert isinstance(message, ResultMessage)
        runtime = ScriptedRuntime([pick_text(name, PICKS[name])])
        expected = make(
            "Pick the next step.",
            python_menu(options),
            runtime=runtime,
            context={"customer": "Ana"},
        )
        assert message.value == json.loads(json.dumps(expected)), name


def test_schema_forms_that_do_not_encode_are_refused_by_name() -> None:
    with pytest.raises(TypeError):  # a list schema holds exactly one template
        MenuJob.of(prompt="p", options={"x": ("d", {"a": [str, int]})}, id="x", reply_to="r")
    with pytest.raises(TypeError):  # a tuple value cannot travel as JSON
        MenuJob.of(prompt="p", options={"x": ((1, 2), "pair")}, id="x", reply_to="r")
    bad = {
        "id": "b",
        "kind": "menu",
        "reply_to": "r",
        "prompt": "p",
        "options": [
            {
                "kind": "schema",
                "name": "s",
                "schema": {
                    "type": "object",
                    "fields": [
                        {"name": "a", "type": "int", "options": ["x"]},
                        {"name": "a", "type": "str"},
                    ],
                },
            },
            {"kind": "value", "name": "v"},
            {"kind": "handler", "name": "h", "handler": "x", "extra": 1},
            {"kind": "macro", "name": "m"},
            {"kind": "value", "name": " padded ", "value": 1},
        ],
        "max_retries": 9,
        "work": {"tools": ["a", "a"], "max_steps": 0},
    }
    with pytest.raises(JobInvalid) as caught:
        parse_job(bad)
    fields = sorted(p.field for p in caught.value.problems)
    assert fields == [
        "max_retries",
        "options[0].schema.fields[0].options[0]",
        "options[1]",
        "options[2]",
        "options[3].kind",
        "options[4].name",
        "work.max_steps",
        "work.tools",
    ]
