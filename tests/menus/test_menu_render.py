"""The text menu: signatures with full types, parameter lines, Call: examples, determinism."""

# ruff: noqa: UP045, E501 - Optional[...] is one of the spellings under test

import json
from typing import Annotated, Any, Literal, Optional

from hypothesis import given, settings

from shared.menus import (
    MENU_HEADER,
    FromContext,
    Runtime,
    Schema,
    SchemaOption,
    build_menu,
    render_options,
)
from shared.menus.faux import ScriptedRuntime
from tests.menus import handlers_future
from tests.menus.support import schemas


def refund(
    order_id: Annotated[str, "the order to refund"],
    amount: float = 0.0,
    reason: Literal["damaged", "late"] = "late",
    *,
    runtime: Runtime,
    user: Annotated[str, FromContext],
) -> str:
    """Issue a refund.

    More text that the model does not need.
    """
    return order_id


OPTIONS: dict[str, Any] = {
    "refund": refund,
    "done": ("CONVERSATION_OVER", "The conversation is over."),
    "emit_plan": (
        "Produce a plan.",
        {
            "steps": [
                {
                    "action": {
                        "type": str,
                        "options": ["run", "stop"],
                        "description": "what to do",
                    },
                    "target": str,
                }
            ],
            "rationale": "why this plan",
            "limit": Optional[int],
            "weight": float,
            "urgent": bool,
            "tags": list,
            "extra": dict,
        },
    ),
}

# The expected text has long lines on purpose: it is the menu byte for byte.
EXPECTED = (
    MENU_HEADER
    + """

- refund(order_id: str, amount: float = 0.0, reason: str = "late")
  Issue a refund.
  order_id: str (required) - the order to refund
  amount: float (optional, default 0.0)
  reason: str (optional, default "late") - one of: "damaged", "late"
  Call: {"call": "refund", "args": {"order_id": "<str>", "amount": 0.0, "reason": "late"}}

- done()
  The conversation is over.
  Call: {"call": "done", "args": {}}

- emit_plan(steps: list[{action: str, target: str}], rationale: str, limit: int | null, weight: float, urgent: bool, tags: list, extra: dict)
  Produce a plan.
  steps: list[{action: str, target: str}] (required)
  steps[].action: str (required) - what to do; one of: "run", "stop"
  rationale: str (required) - why this plan
  limit: int | null (required)
  weight: float (required)
  urgent: bool (required)
  tags: list (required)
  extra: dict (required)
  Call: {"call": "emit_plan", "args": {"steps": [{"action": "run", "target": "<str>"}], "rationale": "<str>", "limit": 0, "weight": 0.0, "urgent": false, "tags": [], "extra": {}}}
"""
)


def test_the_menu_text() -> None:
    assert render_options(OPTIONS) == EXPECTED


def test_injected_parameters_are_hidden() -> None:
    text = render_options(OPTIONS)
    assert "runtime" not in text and "user" not in text
    text = render_options([handlers_future.with_injections])
    assert (
        "order_id: str" in text
        and "runtime" not in text
        and "tenant" not in text
        and "org" not in text
    )


def test_call_examples_are_json_with_json_literal_placeholders() -> None:
    lines = [
        line.strip()
        for line in render_options(OPTIONS).splitlines()
        if line.strip().startswith("Call:")
    ]
    examples = [json.loads(line.removeprefix("Call: ")) for line in lines]
    assert [e["call"] for e in examples] == ["refund", "done", "emit_plan"]
    plan = examples[2]["args"]
    assert plan == {
        "steps": [{"action": "run", "target": "<str>"}],
        "rationale": "<str>",
        "limit": 0,
        "weight": 0.0,
        "urgent": False,
        "tags": [],
        "extra": {},
    }
    assert '"weight": 0.0' in lines[2] and '"urgent": false' in lines[2]


def test_call_example_of_each_option_parses_as_its_own_pick() -> None:
    from shared.menus import parse_args

    for line in render_options(OPTIONS).splitlines():
        if line.strip().startswith("Call:"):
            chosen, _ = parse_args(
                line.strip().removeprefix("Call: "),
                OPTIONS,
                runtime=ScriptedRuntime([]),
                context={"user": "u"},
            )
            assert chosen.name in OPTIONS


def test_kwargs_shows_that_extra_fields_are_accepted() -> None:
    def f(a: int, **extra: Any) -> None:
        """F."""

    text = render_options([f])
    assert "f(a: int, **extra)" in text and "(other fields are accepted too)" in text


def test_nested_descriptions_in_typed_lists_and_dicts() -> None:
    text = render_options(
        {"o": ("d", {"groups": [[{"name": "the group name"}]], "m": dict[str, Literal["a", "b"]]})}
    )
    assert "groups: list[list[{name: str}]] (required)" in text
    assert "groups[][].name: str (required) - the group name" in text
    assert 'm.*: str (required) - one of: "a", "b"' in text
    assert '"groups": [[{"name": "<str>"}]]' in text and '"m": {}' in text


def test_non_json_defaults_render_without_repr() -> None:
    sentinel = object()

    def f(a: Any = sentinel) -> None: ...

    text = render_options([f])
    assert "a: any = <default>" in text and "0x" not in text
    assert '"args": {}' in text


def test_rendering_is_deterministic() -> None:
    first = render_options(OPTIONS)
    assert all(render_options(OPTIONS) == first for _ in range(5))
    assert build_menu(OPTIONS).fingerprint == build_menu(dict(OPTIONS)).fingerprint


def test_fingerprint_is_sha256_of_the_text() -> None:
    import hashlib

    menu = build_menu(OPTIONS)
    assert menu.fingerprint == hashlib.sha256(menu.text.encode()).hexdigest()
    assert build_menu({**OPTIONS, "another": 1}).fingerprint != menu.fingerprint


@settings(max_examples=100, deadline=None)
@given(schemas())
def test_rendering_a_rebuilt_schema_is_byte_identical(schema: Schema) -> None:
    from shared.menus import schema_from_json, schema_to_json

    a = render_options([SchemaOption("plan", schema, "A plan.")])
    b = render_options([SchemaOption("plan", schema_from_json(schema_to_json(schema)), "A plan.")])
    assert a.encode() == b.encode()


def test_render_accepts_a_menu() -> None:
    menu = build_menu(OPTIONS)
    assert render_options(menu) == menu.text == EXPECTED
