"""Option containers: dict and list forms, function introspection, injection, errors."""

# ruff: noqa: UP045 - Optional[...] is one of the spellings under test

import functools
from typing import Annotated, Any, Literal, Optional, TypedDict

import pytest

from shared.menus import (
    FromContext,
    FunctionOption,
    Handler,
    MenuSpecInvalid,
    Runtime,
    Schema,
    SchemaOption,
    TypeSpec,
    ValueOption,
    normalize_options,
)
from shared.menus.faux import ScriptedRuntime
from tests.menus import handlers_future


def retry_fn(reason: str) -> str:
    """Try again.

    Not part of the description.
    """
    return f"retry:{reason}"


def fallback_reply() -> str:
    return "fallback"


class AbortSignal:
    pass


def kinds(options: Any) -> list[tuple[str, str]]:
    return [(o.name, o.kind) for o in normalize_options(options)]


# -- dict form ---------------------------------------------------------------------------------


def test_dict_form_all_handler_shapes() -> None:
    signal = AbortSignal()
    options = normalize_options(
        {
            "retry": retry_fn,
            "retry2": (retry_fn, "Retry, described."),
            "skip": "SKIPPED",
            "abort": (signal, "pick when stuck"),
            "emit_plan": (
                "Produce a plan.",
                {"steps": [{"action": str, "target": str}], "rationale": str},
            ),
            "nothing": None,
            "close": {"status": "closed"},
        }
    )
    by = {o.name: o for o in options}
    assert [o.name for o in options] == [
        "retry",
        "retry2",
        "skip",
        "abort",
        "emit_plan",
        "nothing",
        "close",
    ]
    assert isinstance(by["retry"], FunctionOption) and by["retry"].func is retry_fn
    assert by["retry"].description == "Try again."
    assert by["retry2"].description == "Retry, described."
    assert by["skip"] == ValueOption("skip", "SKIPPED")
    assert isinstance(by["abort"], ValueOption)
    assert by["abort"].value is signal
    assert by["abort"].description == "pick when stuck"
    assert (
        isinstance(by["emit_plan"], SchemaOption)
        and by["emit_plan"].description == "Produce a plan."
    )
    assert by["emit_plan"].schema.names == ("steps", "rationale")
    assert isinstance(by["nothing"], ValueOption) and by["nothing"].value is None
    assert isinstance(by["close"], ValueOption) and by["close"].value == {"status": "closed"}


def test_dict_key_names_function_options() -> None:
    (option,) = normalize_options({"go_back": retry_fn})
    assert option.name == "go_back"


def test_tuple_caveat_two_strings_is_value_with_description() -> None:
    (option,) = normalize_options({"pair": ("a", "b")})
    assert option == ValueOption("pair", "a", "b")


def test_tuple_value_must_be_wrapped() -> None:
    with pytest.raises(TypeError, match="wrap a tuple value"):
        normalize_options({"pair": (1, 2)})
    (option,) = normalize_options({"pair": ((1, 2), "a pair")})
    assert isinstance(option, ValueOption) and option.value == (1, 2)
    with pytest.raises(TypeError):
        normalize_options({"triple": ("a", "b", "c")})


def test_schema_option_needs_a_string_description_first() -> None:
    (option,) = normalize_options({"x": ({"a": 1}, "desc")})
    assert isinstance(option, ValueOption) and option.value == {"a": 1}
    (option,) = normalize_options({"x": ("desc", {"a": str})})
    assert isinstance(option, SchemaOption)


def test_normalised_option_in_dict_form_takes_the_key() -> None:
    (option,) = normalize_options({"now_named": ValueOption("old", retry_fn)})
    assert isinstance(option, ValueOption)
    assert option.name == "now_named" and option.value is retry_fn


# -- list form ---------------------------------------------------------------------------------


def test_list_form_all_item_shapes() -> None:
    options = normalize_options(
        [
            retry_fn,
            (fallback_reply, "Reply with a canned answer."),
            "done",
            ("escalate", "Hand over to a person."),
            ("emit_plan", "Produce a plan.", {"steps": [str]}),
        ]
    )
    assert [(o.name, o.kind) for o in options] == [
        ("retry_fn", "function"),
        ("fallback_reply", "function"),
        ("done", "value"),
        ("escalate", "value"),
        ("emit_plan", "schema"),
    ]
    assert options[1].description == "Reply with a canned answer."
    assert options[2] == ValueOption("done", "done")
    assert options[3] == ValueOption("escalate", "escalate", "Hand over to a person.")


@pytest.mark.parametrize(
    "item",
    [42, None, ("name",), ("name", 5), ("a", "b", "c", "d"), ("a", "b", 5), b"bytes"],
)
def test_list_form_malformed_item_is_a_type_error(item: Any) -> None:
    with pytest.raises(TypeError, match=r"options\[0\]"):
        normalize_options([item])


def test_list_form_lambda_needs_a_name() -> None:
    with pytest.raises(TypeError, match="dict form"):
        normalize_options([lambda: 1])


# -- container errors --------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, []])
def test_empty_options_is_a_value_error(options: Any) -> None:
    with pytest.raises(ValueError, match="empty"):
        normalize_options(options)


@pytest.mark.parametrize("options", ["done", 5, None])
def test_options_that_are_not_a_container_are_a_type_error(options: Any) -> None:
    with pytest.raises(TypeError):
        normalize_options(options)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_is_a_value_error(name: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        normalize_options({name: "x"})
    with pytest.raises(ValueError, match="empty"):
        normalize_options([name])


def test_name_with_surrounding_blanks_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalize_options({" done": 1})


def test_non_string_key_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        normalize_options({1: "x"})  # type: ignore[dict-item]


def test_duplicate_names_in_list_form() -> None:
    with pytest.raises(ValueError, match="duplicate option name 'retry_fn'"):
        normalize_options([retry_fn, "retry_fn"])
    with pytest.raises(ValueError, match="duplicate"):
        normalize_options(["a", ("a", "again")])


def test_non_string_description_is_rejected() -> None:
    with pytest.raises(TypeError):
        normalize_options({"x": (retry_fn, 5)})


def test_errors_raise_before_any_model_call() -> None:
    from shared.menus import make

    runtime = ScriptedRuntime([])
    for bad in ({}, [42], {"x": (1, 2)}, {"p": ("d", {"l": [str, int]})}):
        with pytest.raises((TypeError, ValueError)):
            make("pick", bad, runtime=runtime)
    assert runtime.calls == 0


# -- function introspection --------------------------------------------------------------------


def test_function_description_is_the_first_paragraph() -> None:
    (option,) = normalize_options([handlers_future.plan])
    assert option.description == "Make a plan."


def test_function_without_docstring_has_no_description() -> None:
    (option,) = normalize_options([fallback_reply])
    assert option.description is None


def test_string_annotations_are_resolved_and_checked() -> None:
    (option,) = normalize_options([handlers_future.plan])
    assert isinstance(option, FunctionOption)
    specs = {p.name: p.spec for p in option.llm_params}
    assert specs["steps"] == TypeSpec("list", items=TypeSpec("str"))
    assert specs["limit"] == TypeSpec("int", nullable=True)
    assert specs["mode"] == TypeSpec("str", options=("fast", "slow"))
    assert [p.required for p in option.llm_params] == [True, True, False]


def test_unresolvable_annotation_is_a_type_error_naming_the_option() -> None:
    with pytest.raises(TypeError, match="option 'broken'"):
        normalize_options({"broken": handlers_future.unresolvable})


def test_unsupported_annotation_is_a_type_error_naming_the_parameter() -> None:
    def takes_tuple(pair: tuple[int, int]) -> None: ...

    def takes_union(x: int | str) -> None: ...

    with pytest.raises(TypeError, match="parameter 'pair'"):
        normalize_options([takes_tuple])
    with pytest.raises(TypeError, match="unions"):
        normalize_options([takes_union])


def test_annotations_typing_forms() -> None:
    class Step(TypedDict):
        action: str
        target: str

    def f(  # type: ignore[no-untyped-def]
        a: list[Step],
        b: dict[str, int],
        c: Annotated[float, "a ratio"],
        d: Optional[list[str]] = None,
        e: Literal[1, 2] = 1,
        f: Any = None,
        g=3,  # no annotation on purpose
    ) -> None: ...

    (option,) = normalize_options([f])
    assert isinstance(option, FunctionOption)
    specs = {p.name: p.spec for p in option.llm_params}
    step = TypeSpec("object", fields=(_field("action", "str"), _field("target", "str")))
    assert specs["a"] == TypeSpec("list", items=step)
    assert specs["b"] == TypeSpec("dict", values=TypeSpec("int"))
    assert specs["c"] == TypeSpec("float", description="a ratio")
    assert specs["d"] == TypeSpec("list", items=TypeSpec("str"), nullable=True)
    assert specs["e"] == TypeSpec("int", options=(1, 2))
    assert specs["f"] == TypeSpec("any")
    assert specs["g"] == TypeSpec("any")


def _field(name: str, kind: str) -> Any:
    from shared.menus import Field

    return Field(name, TypeSpec(kind))  # type: ignore[arg-type]


def test_docstring_args_section_describes_parameters() -> None:
    def refund(order_id: str, amount: float = 0.0) -> None:
        """Issue a refund.

        Args:
            order_id (str): the order to refund,
                as printed on the invoice
            amount: how much; 0 refunds in full

        Returns:
            nothing
        """

    (option,) = normalize_options([refund])
    assert isinstance(option, FunctionOption)
    descs = {p.name: p.spec.description for p in option.llm_params}
    assert descs == {
        "order_id": "the order to refund, as printed on the invoice",
        "amount": "how much; 0 refunds in full",
    }


def test_sphinx_param_lines_describe_parameters() -> None:
    def f(x: int) -> None:
        """Do it.

        :param x: the amount
        """

    (option,) = normalize_options([f])
    assert isinstance(option, FunctionOption)
    assert option.llm_params[0].spec.description == "the amount"


def test_positional_only_without_default_is_rejected() -> None:
    def f(x: int, /) -> None: ...

    def g(x: int = 1, /, y: int = 2) -> None: ...

    with pytest.raises(TypeError, match="positional-only"):
        normalize_options([f])
    (option,) = normalize_options([g])
    assert isinstance(option, FunctionOption) and [p.name for p in option.params] == ["y"]


def test_callable_object_class_and_partial() -> None:
    class Greeter:
        """Greets."""

        def __call__(self, name: str) -> str:
            return f"hi {name}"

    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    options = normalize_options(
        {"greet": Greeter(), "add1": functools.partial(add, b=1), "signal": AbortSignal}
    )
    greet, add1, signal = options
    assert isinstance(greet, FunctionOption) and [p.name for p in greet.params] == ["name"]
    assert greet.description == "Greets."
    assert isinstance(add1, FunctionOption) and add1.description == "Adds."
    assert isinstance(signal, FunctionOption) and signal.params == ()


# -- injection ---------------------------------------------------------------------------------


def test_injected_parameters_are_classified() -> None:
    (option,) = normalize_options([handlers_future.with_injections])
    assert isinstance(option, FunctionOption)
    sources = {p.name: (p.source, p.context_key) for p in option.params}
    assert sources == {
        "order_id": ("llm", None),
        "runtime": ("runtime", None),
        "user": ("context", "user"),
        "tenant": ("context", "org"),
    }
    assert option.injected_names == {"runtime", "user", "tenant"}


def test_runtime_annotation_injects_whatever_the_name() -> None:
    def f(x: int, rt: Runtime, maybe: Optional[Runtime] = None) -> None: ...

    (option,) = normalize_options([f])
    assert isinstance(option, FunctionOption)
    assert [p.source for p in option.params] == ["llm", "runtime", "runtime"]


def test_context_marker_class_or_instance() -> None:
    def f(a: Annotated[str, FromContext], b: Annotated[int, FromContext("bee")] = 0) -> None: ...

    (option,) = normalize_options([f])
    assert isinstance(option, FunctionOption)
    assert [(p.source, p.context_key, p.required) for p in option.params] == [
        ("context", "a", True),
        ("context", "bee", False),
    ]


def test_kwargs_function_accepts_extra() -> None:
    def f(a: int, **extra: Any) -> None: ...

    (option,) = normalize_options([f])
    assert isinstance(option, FunctionOption) and option.accepts_extra


# -- handler references ------------------------------------------------------------------------


def test_handler_reference_resolves_through_the_registry() -> None:
    options = normalize_options(
        {"refund": Handler("issue_refund"), "redo": (Handler("retry"), "Do it again.")},
        handlers={"issue_refund": retry_fn, "retry": retry_fn},
    )
    assert [(o.name, getattr(o, "handler", None), o.description) for o in options] == [
        ("refund", "issue_refund", "Try again."),
        ("redo", "retry", "Do it again."),
    ]
    (listed,) = normalize_options([Handler("retry")], handlers={"retry": retry_fn})
    assert listed.name == "retry"


def test_unregistered_handler_names_it() -> None:
    with pytest.raises(MenuSpecInvalid, match=r"unknown handler 'nope'.*registered: retry"):
        normalize_options({"x": Handler("nope")}, handlers={"retry": retry_fn})
    with pytest.raises(ValueError, match="unknown handler 'nope'"):
        normalize_options({"x": Handler("nope")})


def test_schema_instance_is_accepted_as_a_schema() -> None:
    (option,) = normalize_options({"x": ("d", Schema())})
    assert option == SchemaOption("x", Schema(), "d")


def test_a_schema_option_cannot_declare_a_decision_field() -> None:
    with pytest.raises(ValueError, match="'decision'"):
        normalize_options({"x": ("d", {"decision": str})})
    with pytest.raises(MenuSpecInvalid) as info:
        from shared.menus import menu_from_json

        menu_from_json(
            [
                {
                    "kind": "schema",
                    "name": "x",
                    "schema": {"type": "object", "fields": [{"name": "decision", "type": "str"}]},
                }
            ],
            {},
        )
    assert info.value.path == "[0].schema"
