"""Menus over the queue: the options encoding, handler registry, JSON Schemas."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

import json
from collections.abc import Callable
from typing import Any, Optional

import pytest

from shared.menus import (
    OPTIONS_JSON_SCHEMA,
    PICK_JSON_SCHEMA,
    FunctionOption,
    Handler,
    MenuSpecInvalid,
    build_menu,
    make,
    menu_from_json,
    menu_to_json,
    parse_pick,
)
from shared.menus.faux import ScriptedRuntime, pick_text
from tests.menus.support import schema_errors


def issue_refund(order_id: str, amount: float = 0.0) -> str:
    """Refund an order."""
    return f"refunded {order_id} {amount}"


def escalate_to_human(reason: str) -> str:
    """Hand the ticket to a person."""
    return f"escalated: {reason}"


REGISTRY: dict[str, Callable[..., Any]] = {
    "issue_refund": issue_refund,
    "escalate_to_human": escalate_to_human,
}

CLIENT_OPTIONS: dict[str, Any] = {
    "refund": Handler("issue_refund"),
    "escalate": (Handler("escalate_to_human"), "Hand over to a person."),
    "close": {"status": "closed"},
    "done": ("DONE", "Nothing else to do."),
    "emit_plan": (
        "Produce a plan.",
        {"steps": [{"action": str, "target": str}], "limit": Optional[int]},
    ),
}


def test_the_options_encoding() -> None:
    assert menu_to_json(CLIENT_OPTIONS) == [
        {"kind": "handler", "name": "refund", "handler": "issue_refund"},
        {
            "kind": "handler",
            "name": "escalate",
            "handler": "escalate_to_human",
            "description": "Hand over to a person.",
        },
        {"kind": "value", "name": "close", "value": {"status": "closed"}},
        {"kind": "value", "name": "done", "value": "DONE", "description": "Nothing else to do."},
        {
            "kind": "schema",
            "name": "emit_plan",
            "schema": {
                "type": "object",
                "fields": [
                    {
                        "name": "steps",
                        "type": "list",
                        "items": {
                            "type": "object",
                            "fields": [
                                {"name": "action", "type": "str"},
                                {"name": "target", "type": "str"},
                            ],
                        },
                    },
                    {"name": "limit", "type": "int", "nullable": True},
                ],
            },
            "description": "Produce a plan.",
        },
    ]


def test_the_encoding_validates_against_its_json_schema() -> None:
    encoded = menu_to_json(CLIENT_OPTIONS)
    assert schema_errors(encoded, OPTIONS_JSON_SCHEMA) == []
    assert schema_errors([], OPTIONS_JSON_SCHEMA) != []
    assert schema_errors([{"kind": "handler", "name": "x"}], OPTIONS_JSON_SCHEMA) != []
    assert schema_errors([{"kind": "value", "name": " x", "value": 1}], OPTIONS_JSON_SCHEMA) != []


def test_a_callable_encodes_as_the_handler_named_by_its_name() -> None:
    assert menu_to_json({"refund": issue_refund, "list_form": "x"})[0] == {
        "kind": "handler",
        "name": "refund",
        "handler": "issue_refund",
    }
    assert menu_to_json({"refund": (issue_refund, "Refund it.")})[0]["description"] == "Refund it."
    assert menu_to_json([issue_refund])[0]["handler"] == "issue_refund"


def test_values_must_be_plain_json() -> None:
    for bad in (object(), {"k": (1, 2)}, {1: "a"}, float("nan"), [set()]):
        with pytest.raises(TypeError, match="option 'v'"):
            menu_to_json({"v": (bad, "desc")})


def test_decoding_resolves_handlers_and_renders_like_the_python_form() -> None:
    wire = json.loads(json.dumps(menu_to_json(CLIENT_OPTIONS)))
    menu = menu_from_json(wire, REGISTRY)
    local = build_menu(
        {
            **CLIENT_OPTIONS,
            "refund": issue_refund,
            "escalate": (escalate_to_human, "Hand over to a person."),
        }
    )
    assert menu.text == local.text and menu.fingerprint == local.fingerprint
    refund = menu.option("refund")
    assert (
        isinstance(refund, FunctionOption)
        and refund.func is issue_refund
        and refund.handler == "issue_refund"
    )
    assert refund.description == "Refund an order."  # from the handler's docstring


def test_a_decoded_menu_drives_make() -> None:
    menu = menu_from_json(menu_to_json(CLIENT_OPTIONS), REGISTRY)
    runtime = ScriptedRuntime([pick_text("refund", {"order_id": "A1", "amount": 2})])
    assert make("Pick.", menu, runtime=runtime) == "refunded A1 2.0"
    assert menu.text in (runtime.requests[0].messages[0]["content"] or "")


def test_an_unregistered_handler_is_named() -> None:
    with pytest.raises(MenuSpecInvalid) as info:
        menu_from_json([{"kind": "handler", "name": "x", "handler": "rm_rf"}], REGISTRY)
    assert info.value.path == "[0].handler"
    assert "unknown handler 'rm_rf'" in str(info.value) and "issue_refund" in str(info.value)


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ({}, ""),
        ([], ""),
        ([5], "[0]"),
        ([{"kind": "lambda", "name": "x"}], "[0].kind"),
        ([{"kind": "value", "name": "x"}], "[0]"),
        ([{"kind": "value", "name": "x", "value": 1, "extra": 2}], "[0]"),
        ([{"kind": "value", "name": "", "value": 1}], "[0].name"),
        ([{"kind": "value", "name": 5, "value": 1}], "[0].name"),
        ([{"kind": "value", "name": "x", "value": 1, "description": ""}], "[0].description"),
        (
            [
                {"kind": "value", "name": "x", "value": 1},
                {"kind": "value", "name": "x", "value": 2},
            ],
            "[1].name",
        ),
        ([{"kind": "handler", "name": "x", "handler": 3}], "[0].handler"),
        (
            [
                {
                    "kind": "schema",
                    "name": "x",
                    "schema": {"type": "object", "fields": [{"name": "a"}]},
                }
            ],
            "[0].schema.fields[0].type",
        ),
    ],
)
def test_invalid_menus_name_the_path(bad: Any, path: str) -> None:
    with pytest.raises(MenuSpecInvalid) as info:
        menu_from_json(bad, REGISTRY)
    assert info.value.path == path


def test_a_reviewer_answer_goes_through_the_same_parser() -> None:
    menu = menu_from_json(menu_to_json(CLIENT_OPTIONS), REGISTRY)
    answer = {
        "call": "emit_plan",
        "args": {"steps": [{"action": "a", "target": "b"}], "limit": None},
    }
    assert schema_errors(answer, PICK_JSON_SCHEMA) == []
    pick = parse_pick(answer, menu)
    assert pick.to_json() == answer


def test_a_decoded_menu_encodes_back_to_the_same_json() -> None:
    wire = menu_to_json(CLIENT_OPTIONS)
    assert menu_to_json(menu_from_json(wire, REGISTRY)) == wire
