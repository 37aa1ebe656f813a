"""The schema's one JSON encoding: shape, strict decoding, its JSON Schema, round-trips."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

import json
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.menus import (
    SCHEMA_JSON_SCHEMA,
    MenuSpecInvalid,
    Schema,
    TypeSpec,
    normalize_schema,
    schema_from_json,
    schema_to_json,
    type_json_schema,
)
from tests.menus.support import schema_errors, schemas, to_notation, type_specs

PLAN = {
    "steps": [
        {"action": {"type": str, "options": ["run", "stop"], "description": "what"}, "target": str}
    ],
    "rationale": "why",
    "limit": Optional[int],
    "scores": dict[str, float],
}


def test_the_encoding_of_a_plan() -> None:
    assert schema_to_json(PLAN) == {
        "type": "object",
        "fields": [
            {
                "name": "steps",
                "type": "list",
                "items": {
                    "type": "object",
                    "fields": [
                        {
                            "name": "action",
                            "type": "str",
                            "description": "what",
                            "options": ["run", "stop"],
                        },
                        {"name": "target", "type": "str"},
                    ],
                },
            },
            {"name": "rationale", "type": "str", "description": "why"},
            {"name": "limit", "type": "int", "nullable": True},
            {"name": "scores", "type": "dict", "values": {"type": "float"}},
        ],
    }


def test_the_encoding_validates_against_its_json_schema() -> None:
    assert schema_errors(schema_to_json(PLAN), SCHEMA_JSON_SCHEMA) == []


def test_normalised_schema_and_notation_encode_the_same() -> None:
    assert schema_to_json(normalize_schema(PLAN)) == schema_to_json(PLAN)


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ([], ""),
        ({"type": "object"}, ""),
        ({"type": "object", "fields": [], "extra": 1}, ""),
        ({"type": "object", "fields": [{"type": "str"}]}, "fields[0].name"),
        ({"type": "object", "fields": [{"name": "a", "type": "string"}]}, "fields[0].type"),
        (
            {
                "type": "object",
                "fields": [{"name": "a", "type": "str"}, {"name": "a", "type": "int"}],
            },
            "fields[1].name",
        ),
        ({"type": "object", "fields": [{"name": "a", "type": "list"}]}, "fields[0]"),
        (
            {"type": "object", "fields": [{"name": "a", "type": "str", "items": {"type": "str"}}]},
            "fields[0]",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "options": ["x"]}]},
            "fields[0].options[0]",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "options": [True]}]},
            "fields[0].options[0]",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "options": [None]}]},
            "fields[0].options[0]",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "options": []}]},
            "fields[0].options",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "nullable": False}]},
            "fields[0].nullable",
        ),
        (
            {"type": "object", "fields": [{"name": "a", "type": "int", "description": ""}]},
            "fields[0].description",
        ),
        (
            {
                "type": "object",
                "fields": [{"name": "a", "type": "list", "items": {"type": "list"}}],
            },
            "fields[0].items",
        ),
        ({"type": "object", "fields": "a"}, "fields"),
    ],
)
def test_invalid_encodings_name_the_path(bad: Any, path: str) -> None:
    with pytest.raises(MenuSpecInvalid) as info:
        schema_from_json(bad)
    assert info.value.path == path
    assert isinstance(info.value, ValueError)


def test_deep_encodings_are_refused() -> None:
    node: dict[str, Any] = {"type": "str"}
    for _ in range(100):
        node = {"type": "list", "items": node}
    with pytest.raises(MenuSpecInvalid, match="deeper"):
        schema_from_json({"type": "object", "fields": [{"name": "a", **node}]})


@settings(max_examples=300, deadline=None)
@given(schemas())
def test_round_trip_schema_json_schema(schema: Schema) -> None:
    encoded = schema_to_json(schema)
    assert schema_from_json(encoded) == schema
    # Through JSON text, as on the queue, and back to the same bytes.
    wire = json.loads(json.dumps(encoded))
    assert schema_from_json(wire) == schema
    assert json.dumps(schema_to_json(schema_from_json(wire))) == json.dumps(encoded)
    assert schema_errors(encoded, SCHEMA_JSON_SCHEMA) == []


@settings(max_examples=200, deadline=None)
@given(schemas(with_dict=False, nullable_containers=False))
def test_round_trip_from_the_python_notation(schema: Schema) -> None:
    notation = {f.name: to_notation(f.spec) for f in schema.fields}
    assert normalize_schema(notation) == schema
    assert schema_from_json(schema_to_json(notation)) == schema


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=3),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "type",
                        "name",
                        "fields",
                        "items",
                        "values",
                        "options",
                        "nullable",
                        "description",
                        "x",
                    ]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=10,
    )
)
def test_arbitrary_json_decodes_or_is_refused_cleanly(obj: Any) -> None:
    try:
        schema = schema_from_json(obj)
    except MenuSpecInvalid:
        return
    assert schema_to_json(schema) == obj


@settings(max_examples=100, deadline=None)
@given(type_specs())
def test_type_json_schema_is_a_json_schema_of_the_examples(spec: TypeSpec) -> None:
    from shared.menus.shapes import example_value

    # The placeholder is a valid value of its own JSON Schema (nullable aside, it fits).
    assert schema_errors(example_value(spec), type_json_schema(spec)) == []


def test_type_json_schema_for_tool_parameters() -> None:
    got = type_json_schema(normalize_schema(PLAN).as_type())
    assert got["required"] == ["steps", "rationale", "limit", "scores"]
    assert got["properties"]["limit"] == {"type": ["integer", "null"]}
    assert got["properties"]["steps"]["items"]["properties"]["action"] == {
        "type": "string",
        "enum": ["run", "stop"],
        "description": "what",
    }
    assert got["properties"]["scores"] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
