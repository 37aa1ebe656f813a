"""Extracting the JSON pick from a reply."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.menus import PickError, extract_action


def test_fenced_json_block() -> None:
    text = 'I will route it.\n```json\n{"call": "analyze", "args": {"msg": "hi"}}\n```\n'
    assert extract_action(text) == (
        "analyze",
        {"msg": "hi"},
        '{"call": "analyze", "args": {"msg": "hi"}}',
    )


def test_bare_fence() -> None:
    text = 'Done.\n```\n{"call": "done", "args": {}}\n```'
    assert extract_action(text)[:2] == ("done", {})


def test_prose() -> None:
    text = 'After looking at it, my pick is {"call": "skip", "args": {}} since nothing is needed.'
    assert extract_action(text)[:2] == ("skip", {})


def test_braces_inside_strings_do_not_count() -> None:
    text = 'Pick: {"call": "say", "args": {"text": "a } b { c \\" }"}}'
    assert extract_action(text)[:2] == ("say", {"text": 'a } b { c " }'})


def test_prose_braces_around_the_pick() -> None:
    text = 'Use {placeholders} like {this one; then {"call": "go", "args": {"n": 1}} } and stop'
    assert extract_action(text)[:2] == ("go", {"n": 1})


@pytest.mark.parametrize("key", ["call", "action", "function", "tool"])
def test_call_key_aliases(key: str) -> None:
    assert extract_action(json.dumps({key: "x", "args": {"a": 1}}))[:2] == ("x", {"a": 1})


def test_call_wins_over_aliases_which_become_fields() -> None:
    assert extract_action('{"call": "plan", "action": "deploy"}')[:2] == (
        "plan",
        {"action": "deploy"},
    )


def test_last_candidate_wins() -> None:
    text = (
        'First I thought {"call": "retry", "args": {}} but after the tool output, '
        'the answer is:\n```json\n{"call": "done", "args": {}}\n```'
    )
    assert extract_action(text)[0] == "done"


def test_objects_without_a_call_key_are_not_candidates() -> None:
    text = '{"call": "go", "args": {}} and here is some data {"x": 1}'
    assert extract_action(text)[0] == "go"


def test_nested_objects_of_a_candidate_are_not_candidates() -> None:
    text = '{"call": "emit_plan", "args": {"steps": [{"action": "deploy", "target": "db"}]}}'
    name, args, _ = extract_action(text)
    assert name == "emit_plan" and args["steps"][0]["action"] == "deploy"


def test_flat_form() -> None:
    assert extract_action('{"call": "refund", "order_id": "A1", "amount": 3}')[:2] == (
        "refund",
        {"order_id": "A1", "amount": 3},
    )


def test_arguments_alias_and_json_string_arguments() -> None:
    assert extract_action('{"call": "f", "arguments": {"a": 1}}')[1] == {"a": 1}
    assert extract_action(json.dumps({"call": "f", "arguments": '{"a": 1}'}))[1] == {"a": 1}


@pytest.mark.parametrize("call", [["a"], {"name": "a"}, 3, None, True])
def test_non_string_call_is_a_parse_error(call: Any) -> None:
    with pytest.raises(PickError) as info:
        extract_action(json.dumps({"call": call, "args": {}}))
    assert info.value.kind == "unknown_call"


def test_openai_style_function_object_is_a_parse_error() -> None:
    with pytest.raises(PickError) as info:
        extract_action('{"function": {"name": "refund", "arguments": "{}"}}')
    assert info.value.kind == "unknown_call"


@pytest.mark.parametrize("args", [[1, 2], "not json", 5, None, '"a string"'])
def test_non_object_args_is_bad_args(args: Any) -> None:
    with pytest.raises(PickError) as info:
        extract_action(json.dumps({"call": "f", "args": args}))
    assert info.value.kind == "bad_args"


@pytest.mark.parametrize("reply", [None, 42, b'{"call": "x"}', ["call"], {"call": "x"}])
def test_non_text_reply_is_a_parse_error(reply: Any) -> None:
    with pytest.raises(PickError) as info:
        extract_action(reply)
    assert info.value.kind == "no_action"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I pick analyze.",
        '{"x": 1}',
        '{"call": "x", }',
        "```json\n{call: x}\n```",
        '{"call": NaN}',
    ],
)
def test_no_candidate_is_no_action(text: str) -> None:
    with pytest.raises(PickError) as info:
        extract_action(text)
    assert info.value.kind == "no_action"


def test_nan_is_not_json() -> None:
    with pytest.raises(PickError):
        extract_action('{"call": "f", "args": {"x": NaN}}')
    assert extract_action('{"call": "f", "args": {"x": "NaN"}}')[1] == {"x": "NaN"}


def test_broken_pick_is_hinted() -> None:
    with pytest.raises(PickError, match="did not parse"):
        extract_action('{"call": "f", "args": {"x": 1,}}')


def test_deep_nesting_is_a_parse_error_not_a_recursion_error() -> None:
    with pytest.raises(PickError):
        extract_action('{"call": "f", "args": ' + "[" * 100_000 + "]" * 100_000 + "}")


_FRAGMENTS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        ":",
        ",",
        "```json\n",
        "```",
        "\n",
        '{"call": ',
        '"x"',
        "null",
        '{"action": 1}',
        '"args": 5',
        '"args": {',
        "NaN",
        "1e999",
        "true",
        " ",
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(), st.lists(st.one_of(_FRAGMENTS, st.text(max_size=3)), max_size=30).map("".join)
    )
)
def test_extract_never_raises_anything_but_the_parse_error(text: str) -> None:
    try:
        name, args, raw = extract_action(text)
    except PickError as error:
        assert error.kind in {"no_action", "unknown_call", "bad_args"}
        return
    assert isinstance(name, str) and isinstance(args, dict) and raw in text


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.binary(),
        st.lists(st.integers()),
        st.dictionaries(st.text(), st.text()),
        st.just(object()),
    )
)
def test_extract_on_non_text_raises_only_the_parse_error(value: Any) -> None:
    if isinstance(value, str):
        return
    with pytest.raises(PickError):
        extract_action(value)


_PROSE = st.text(alphabet=st.characters(blacklist_characters="{}", codec="utf-8"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    _PROSE,
    _PROSE,
    st.text(min_size=1, max_size=10),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
def test_a_pick_in_any_prose_is_found(
    before: str, after: str, name: str, args: dict[str, int]
) -> None:
    pick = json.dumps({"call": name, "args": args})
    assert extract_action(f"{before}{pick}{after}") == (name, args, pick)
