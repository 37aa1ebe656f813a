"""The schema notation and recursive validation of a model's payload."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

from typing import Any, Literal, Optional

import pytest

from shared.menus import Field, PickError, Schema, TypeSpec, normalize_schema, parse_args
from shared.menus.schema import spec_from_notation


def spec(notation: Any) -> TypeSpec:
    return spec_from_notation(notation, path="f")


# -- the notation --------------------------------------------------------------------------------


def test_scalar_types() -> None:
    assert [spec(t).kind for t in (str, int, float, bool, Any, list, dict)] == [
        "str",
        "int",
        "float",
        "bool",
        "any",
        "list",
        "dict",
    ]


def test_string_is_a_described_str() -> None:
    assert spec("the reason") == TypeSpec("str", description="the reason")


def test_list_template_exactly_one() -> None:
    assert spec([str]) == TypeSpec("list", items=TypeSpec("str"))
    with pytest.raises(TypeError, match="exactly one"):
        spec([str, int])
    with pytest.raises(TypeError, match="exactly one"):
        spec([])


def test_nested_object_and_list_of_objects() -> None:
    got = normalize_schema({"steps": [{"action": str, "target": str}], "rationale": str})
    step = TypeSpec(
        "object", fields=(Field("action", TypeSpec("str")), Field("target", TypeSpec("str")))
    )
    assert got == Schema(
        (Field("steps", TypeSpec("list", items=step)), Field("rationale", TypeSpec("str")))
    )


def test_meta_spec_with_type_description_options() -> None:
    got = spec({"type": str, "description": "what to do", "options": ["run", "stop"]})
    assert got == TypeSpec("str", description="what to do", options=("run", "stop"))


def test_meta_spec_defaults_to_a_described_str() -> None:
    assert spec({"description": "why"}) == TypeSpec("str", description="why")


def test_dict_with_a_key_outside_the_meta_set_is_a_nested_object() -> None:
    got = spec({"type": str, "description": str, "extra": int})
    assert got.kind == "object"
    assert [f.name for f in got.fields] == ["type", "description", "extra"]


def test_dict_whose_keys_all_lie_in_the_meta_set_is_a_meta_spec() -> None:
    # The seed's caveat: a would-be object {type, description} reads as a meta-spec...
    with pytest.raises(TypeError, match="meta-spec"):
        spec({"type": "str", "description": "x"})
    # ...and `fields` is the way to declare such an object.
    got = spec({"fields": {"type": str, "description": str}})
    assert [f.name for f in got.fields] == ["type", "description"]


def test_meta_spec_items_and_fields() -> None:
    assert spec({"items": int, "description": "ids"}) == TypeSpec(
        "list", "ids", items=TypeSpec("int")
    )
    with pytest.raises(TypeError, match="not both"):
        spec({"items": int, "fields": {"a": int}})
    with pytest.raises(TypeError):
        spec({"type": int, "items": int})


def test_meta_spec_options_checked_against_the_type() -> None:
    assert spec({"type": float, "options": [1, 2.5]}).options == (1.0, 2.5)
    with pytest.raises(TypeError, match="not a int"):
        spec({"type": int, "options": ["a"]})
    with pytest.raises(TypeError):
        spec({"type": int, "options": [True]})  # bool is not an int, in enums too
    with pytest.raises(ValueError, match="empty"):
        spec({"type": str, "options": []})
    with pytest.raises(TypeError, match="scalar"):
        spec({"type": list, "options": [[1]]})


def test_meta_spec_accepts_typing_types() -> None:
    assert spec({"type": Optional[int], "options": [1, None]}) == TypeSpec(
        "int", options=(1, None), nullable=True
    )
    assert spec(Literal["a", "b"]) == TypeSpec("str", options=("a", "b"))
    assert spec(list[int]) == TypeSpec("list", items=TypeSpec("int"))


@pytest.mark.parametrize("bad", [{}, (str, "desc"), None, 5, object])
def test_malformed_notation_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError):
        spec(bad)


def test_errors_name_the_field_path() -> None:
    with pytest.raises(TypeError, match=r"steps\[\]\.action"):
        normalize_schema({"steps": [{"action": [int, str]}]})


def test_top_level_is_always_a_field_map() -> None:
    got = normalize_schema({"type": str, "description": str})
    assert got.names == ("type", "description")
    with pytest.raises(TypeError):
        normalize_schema([str])  # type: ignore[arg-type]


def test_self_referencing_notation_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    with pytest.raises(TypeError, match="deeper"):
        normalize_schema(loop)


# -- validation -----------------------------------------------------------------------------------

PLAN = {
    "emit_plan": (
        "Produce a plan.",
        {
            "steps": [{"action": {"type": str, "options": ["run", "stop"]}, "target": str}],
            "rationale": str,
            "weight": float,
            "count": int,
            "urgent": bool,
            "meta": {"owner": str},
        },
    )
}
GOOD = {
    "steps": [{"action": "run", "target": "db"}],
    "rationale": "because",
    "weight": 0.5,
    "count": 2,
    "urgent": False,
    "meta": {"owner": "ops"},
}


def pick(args: dict[str, Any]) -> dict[str, Any]:
    _, kwargs = parse_args({"call": "emit_plan", "args": args}, PLAN)
    return kwargs


def fails(args: dict[str, Any]) -> PickError:
    with pytest.raises(PickError) as info:
        pick(args)
    return info.value


def test_a_good_payload_validates() -> None:
    assert pick(GOOD) == GOOD


def test_every_declared_field_is_required_recursively() -> None:
    error = fails({**GOOD, "steps": [{"action": "run"}]})
    assert (error.kind, error.path) == ("missing_required", "steps[0].target")
    error = fails({k: v for k, v in GOOD.items() if k != "rationale"})
    assert (error.kind, error.path) == ("missing_required", "rationale")
    error = fails({**GOOD, "meta": {}})
    assert (error.kind, error.path) == ("missing_required", "meta.owner")


def test_extra_fields_are_dropped_at_every_level() -> None:
    noisy = {
        **GOOD,
        "hallucinated": 1,
        "steps": [{"action": "run", "target": "db", "why": "x"}],
        "meta": {"owner": "ops", "extra": True},
    }
    assert pick(noisy) == GOOD


def test_bool_is_not_an_int_nor_a_float() -> None:
    error = fails({**GOOD, "count": True})
    assert (error.kind, error.path) == ("type_mismatch", "count")
    assert "expected int, got boolean" in error.message
    assert fails({**GOOD, "weight": False}).kind == "type_mismatch"


def test_int_is_accepted_for_float_and_converted() -> None:
    got = pick({**GOOD, "weight": 3})
    assert got["weight"] == 3.0 and isinstance(got["weight"], float)


def test_float_is_not_an_int() -> None:
    assert fails({**GOOD, "count": 2.0}).kind == "type_mismatch"


def test_enum_violation_names_the_path_and_allowed_values() -> None:
    error = fails({**GOOD, "steps": [{"action": "fly", "target": "db"}]})
    assert (error.kind, error.path) == ("enum_violation", "steps[0].action")
    assert '"run", "stop"' in error.message


def test_type_mismatch_in_nested_lists() -> None:
    error = fails(
        {**GOOD, "steps": [{"action": "run", "target": "db"}, {"action": 3, "target": "x"}]}
    )
    assert (error.kind, error.path) == ("type_mismatch", "steps[1].action")
    assert fails({**GOOD, "steps": {"action": "run"}}).path == "steps"
    assert fails({**GOOD, "meta": "ops"}).path == "meta"


def test_null_fits_only_nullable_fields() -> None:
    error = fails({**GOOD, "rationale": None})
    assert "got null" in error.message
    options = {"o": ("d", {"limit": Optional[int]})}
    assert parse_args({"call": "o", "args": {"limit": None}}, options)[1] == {"limit": None}


def test_all_problems_are_reported_at_once() -> None:
    error = fails({"steps": [{"action": 1, "target": 2}], "weight": "x"})
    paths = [p.path for p in error.problems]
    assert paths[:3] == ["steps[0].action", "steps[0].target", "rationale"]
    assert "weight" in paths and error.kind == "type_mismatch"
    assert "steps[0].action" in error.message and "rationale" in error.message


def test_dict_values_are_validated_with_their_key_in_the_path() -> None:
    options = {"o": ("d", {"scores": dict[str, int]})}
    with pytest.raises(PickError) as info:
        parse_args({"call": "o", "args": {"scores": {"a": 1, "b": "x"}}}, options)
    assert info.value.path == "scores.b"


def test_non_finite_floats_are_refused() -> None:
    options = {"o": ("d", {"x": float})}
    with pytest.raises(PickError):
        parse_args({"call": "o", "args": {"x": float("inf")}}, options)
